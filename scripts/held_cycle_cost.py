"""What a held cycle costs beyond a plain one (issue #35: "never slower" on a draft that does not pay).

While K = auto holds a draft at K = 0, each cycle is one target pass, as with speculation off, plus
what stays ready to speculate: the lookups ahead of the draft, K = auto's asks and the guard's
bookkeeping. This loads a pair, runs the prompts with speculation off and with K = auto
(interleaved, `--rounds` times, which of the two runs first alternating) and prints, per cycle, the
host's milliseconds by part (`engine.llama.hostcost`: sampling, draft, rollback, bookkeeping) for
the plain cycles of the off runs and for the held cycles of the auto runs (nothing drafted, one
token), and what the other auto cycles (drafts, probes, lookups) took against plain ones for their
tokens, in all and by the drafter that worked in them (`other:model`, `other:suffix`, ...).

    python scripts/held_cycle_cost.py TARGET.gguf DRAFT.gguf --temperature 0.8 --tokens 128 --rounds 2

Wall-clock figures: run it on an otherwise idle machine (docs/BENCHMARKS.md, "Never slower").
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from pair_script import add_rounds, load_pair, pair_parser, render  # scripts/, beside this file

from spectui.engine.events import CycleStats, Finished, Progress
from spectui.engine.generation_config import AUTO, DraftControl, DraftLength, GenerationConfig
from spectui.engine.generator import Generator
from spectui.engine.llama.hostcost import HostCost

PROMPTS = ("Write a short poem about the sea.",
           "How do I sort a list of numbers in Python? Explain briefly.",
           "Once upon a time, in a small village by the sea, there lived an old fisherman who")


@dataclass
class Cycles:
    """Cycles of one kind: their count, tokens, seconds inside the step, and host time by part."""

    n: int = 0
    tokens: int = 0
    seconds: float = 0.0
    host: HostCost = field(default_factory=HostCost)
    step_ms: list[float] = field(default_factory=list)

    def add(self, cycle: CycleStats) -> None:
        self.n += 1
        self.tokens += cycle.emitted
        self.seconds += cycle.seconds
        self.host = self.host + cycle.host
        self.step_ms.append(cycle.seconds * 1e3)

    def summary(self) -> dict[str, object]:
        per_cycle = self.host.per_cycle_ms(max(self.n, 1))
        return {"cycles": self.n, "tokens": self.tokens, "seconds": round(self.seconds, 4),
                "step_ms_median": round(statistics.median(self.step_ms), 3) if self.step_ms else None,
                "host_ms_per_cycle": {part: round(ms, 4) for part, ms in per_cycle.items()}}


def run(gen: Generator, tokens: list[int], config: GenerationConfig, k: DraftLength,
        kinds: dict[str, Cycles]) -> float:
    """One reply; its cycles sorted into `kinds` (off: plain, auto: held or other). Returns tok/s."""
    gen.reset()
    tps = 0.0
    for event in gen.generate(tokens, config, DraftControl(k)):
        if isinstance(event, Progress):
            cycle = event.cycle
            if k == 0:
                kinds["plain"].add(cycle)
            elif cycle.drafted == 0 and cycle.emitted == 1 and not cycle.probe:
                kinds["held"].add(cycle)
            else:
                kinds["other"].add(cycle)
                kinds.setdefault(f"other:{cycle.source or 'plain'}", Cycles()).add(cycle)
        elif isinstance(event, Finished):
            tps = event.stats.decode_tps
    return tps


def main() -> None:
    parser = pair_parser(__doc__.splitlines()[0], temperature=0.8, tokens=128, threads=2)
    add_rounds(parser, rounds=2, prompts="three")
    args = parser.parse_args()
    gen, config = load_pair(args)
    try:
        rendered = render(gen, config, args.prompt or list(PROMPTS))
        kinds = {"plain": Cycles(), "held": Cycles(), "other": Cycles()}
        ratios = []
        for r in range(args.rounds):
            for i, tokens in enumerate(rendered):
                # which runs first alternates, so neither side always gets the warm (or cold) slot
                tps = {k: run(gen, tokens, config, k, kinds) for k in ((AUTO, 0) if (r + i) % 2 else (0, AUTO))}
                ratios.append(round(tps[AUTO] / tps[0], 3) if tps[0] > 0 else None)
        plain, held = kinds["plain"], kinds["held"]
        print(json.dumps({kind: cycles.summary() for kind, cycles in kinds.items()} | {"ratios": ratios}))
        if plain.n and held.n:
            extra = (held.host.host / held.n - plain.host.host / plain.n) * 1e3
            print(f"a held cycle's host work over a plain one's: {extra:+.3f} ms "
                  f"(plain cycle {statistics.median(plain.step_ms):.2f} ms in the step, median; "
                  f"held cycles took {held.seconds:.3f} s in all)")
        if plain.tokens:
            plain_per_token = plain.seconds / plain.tokens
            for name, other in kinds.items():
                if name.startswith("other") and other.n:
                    print(f"{name} auto cycles: {other.n}, {other.tokens} tokens in {other.seconds:.3f} s "
                          f"({other.seconds - other.tokens * plain_per_token:+.3f} s against plain cycles for those "
                          "tokens)")
    finally:
        gen.close()


if __name__ == "__main__":
    main()
