"""One K = auto reply to the agent benchmark's code edit (scripts/agent_prompts.py), in process:
its speed, the suffix lookup's cycles (proposed, accepted, seconds) and K = auto's verify table
(ms per pass size) at the end, as one JSON line. Run alternately from two checkouts
(`PYTHONPATH=CHECKOUT`) for a side-by-side A/B of a change to the lookups or K = auto.

    python scripts/edit_reply_cycles.py TARGET.gguf DRAFT.gguf --tokens 600 --threads 2
"""

from __future__ import annotations

import json
from dataclasses import replace

from agent_prompts import edit_messages  # scripts/, beside this file (the script's own folder is on the path)
from pair_script import load_pair, pair_parser

from spectui.bench import workload
from spectui.chat.template import ChatMessage
from spectui.engine.events import Finished, Progress
from spectui.engine.generation_config import AUTO, DraftControl
from spectui.session.reply import prepare


def main() -> None:
    args = pair_parser(__doc__.splitlines()[0], temperature=0.0, tokens=600, threads=2).parse_args()
    gen, config = load_pair(args)
    try:
        work = workload(gen, ["edit"], config, None)
        messages = tuple(ChatMessage(str(m["role"]), str(m["content"])) for m in edit_messages())
        prompt = prepare(gen, work.chat_format, replace(work.request("edit", 0), messages=messages)).tokens
        suffix: list[tuple[int, int, float]] = []
        finished = None
        for event in gen.generate(prompt, config, DraftControl(AUTO)):
            if isinstance(event, Progress) and event.cycle.source == "suffix":
                suffix.append((event.cycle.drafted, event.cycle.accepted, round(event.cycle.seconds, 3)))
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None
        table = gen.auto(config.sampling.greedy).verify.table()
        print(json.dumps({"tps": round(finished.stats.decode_tps, 2), "tokens": len(finished.tokens),
                          "suffix": suffix, "table_ms": {k: round(v * 1e3) for k, v in sorted(table.items())}}))
    finally:
        gen.close()


if __name__ == "__main__":
    main()
