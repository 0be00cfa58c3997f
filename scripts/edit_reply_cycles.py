"""One K = auto reply to the agent benchmark's code edit (scripts/agent_prompts.py), in process:
its speed, the suffix lookup's cycles (proposed, accepted, seconds) and K = auto's verify table
(ms per pass size) at the end, as one JSON line. Run alternately from two checkouts
(`PYTHONPATH=CHECKOUT`) for a side-by-side A/B of a change to the lookups or K = auto.

    python scripts/edit_reply_cycles.py TARGET.gguf DRAFT.gguf --tokens 600 --threads 2
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from agent_prompts import edit_messages  # scripts/, beside this file (the script's own folder is on the path)

from spectui.bench import workload
from spectui.engine.drafters.spec import DrafterSpec
from spectui.engine.events import Finished, Progress
from spectui.engine.generation_config import AUTO, LLAMA_CPP_SAMPLING, DraftControl, GenerationConfig
from spectui.engine.generator import load_generator
from spectui.session.reply import ChatMessage, prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    gen = load_generator(args.target, DrafterSpec(kind="auto", draft=Path(args.draft)), n_threads=args.threads)
    try:
        config = GenerationConfig(max_tokens=args.tokens,
                                  sampling=replace(LLAMA_CPP_SAMPLING, temperature=args.temperature, seed=1))
        work = workload(gen, ["edit"], config, None)
        messages = tuple(ChatMessage(m["role"], m["content"]) for m in edit_messages())
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
