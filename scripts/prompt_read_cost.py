"""What reading a prompt costs when the draft model reads it too, and when it does not (issue #35).

Before the first token the target reads the prompt; the draft model used to read it as well,
whether or not it would draft. It now leaves it unread when it will not draft soon
(`DraftModelDrafter.prefill_optional`): with speculation off, and when K = auto holds it with no
probe due on the reply's first cycle. This loads a pair, warms K = auto on the prompts (a pair
whose draft does not pay ends up held), then times each prompt's read (the reply's
`prompt_seconds`: the target's read, the draft's when it reads, and the first token) for K = 0
and for a held K = auto reply (the probe budget marked spent, so no probe is due), with the draft
reading the prompt (as before) and without, interleaved, `--rounds` times, which of the two runs
first alternating. Prints the median milliseconds of each.

    python scripts/prompt_read_cost.py TARGET.gguf DRAFT.gguf --temperature 1.0 --rounds 6

Wall-clock figures: run it on an otherwise idle machine.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

from pair_script import add_rounds, load_pair, pair_parser, render  # scripts/, beside this file

from spectui.engine.drafters.model import DraftModelDrafter
from spectui.engine.events import Finished
from spectui.engine.generation_config import AUTO, DraftControl, DraftLength, GenerationConfig
from spectui.engine.generator import Generator

PROMPTS = ("How do I sort a list of numbers in Python? Explain briefly.",
           "Write a Python function that checks whether a string is a palindrome.",
           "Once upon a time, in a small village by the sea, there lived an old fisherman who",
           "Write a short poem about the autumn rain.")


def prompt_ms(gen: Generator, tokens: list[int], config: GenerationConfig, k: DraftLength) -> float:
    """One reply from a cold cache; the milliseconds its prompt read took."""
    gen.reset()
    final = list(gen.generate(tokens, config, DraftControl(k)))[-1]
    assert isinstance(final, Finished)
    return final.stats.prompt_seconds * 1e3


def main() -> None:
    parser = pair_parser(__doc__.splitlines()[0], temperature=1.0, tokens=64, threads=2)
    add_rounds(parser, rounds=4, prompts="four")
    args = parser.parse_args()
    gen, config = load_pair(args)
    try:
        rendered = render(gen, config, args.prompt or list(PROMPTS))
        for tokens in rendered * 2:  # K = auto learns the pair: a draft that does not pay is held
            prompt_ms(gen, tokens, config, AUTO)
        auto = gen.auto(config.sampling.greedy)
        held = sorted(auto.holds)
        first_token = replace(config, max_tokens=1)
        times: dict[str, list[float]] = {}
        for r in range(args.rounds):
            for i, tokens in enumerate(rendered):
                for reads in ((True, False) if (r + i) % 2 else (False, True)):
                    DraftModelDrafter.prefill_optional = not reads
                    name = "draft reads" if reads else "draft skips"
                    times.setdefault(f"K = 0, {name}", []).append(prompt_ms(gen, tokens, first_token, 0))
                    if held:
                        auto.probes.spend_all()  # no probe due on the first cycle
                        times.setdefault(f"held, {name}", []).append(prompt_ms(gen, tokens, first_token, AUTO))
        DraftModelDrafter.prefill_optional = True
        report = {"held": held, "prompt_tokens": [len(t) for t in rendered],
                  "median_ms": {kind: round(statistics.median(ms), 2) for kind, ms in times.items()}}
        print(json.dumps(report))
        for kind, ms in report["median_ms"].items():
            print(f"{kind}: {ms:.1f} ms (median of {len(times[kind])})")
        if not held:
            print("K = auto held no drafter on these prompts: only K = 0 was timed")
    finally:
        gen.close()


if __name__ == "__main__":
    main()
