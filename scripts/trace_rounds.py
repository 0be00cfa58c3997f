"""Why one prompt's cell of the never-slower sweep read under the line: its replies, cycle by cycle.

`scripts/sweep_never_slower.py` prints each prompt's median ratio over the rounds; this runs the
same six prompts (or the kinds named with `--kinds`) the way `spectui bench` does (each prompt's
baseline and K = auto reply back to back, the order reversed every other round, sampled with
seed + round - 1) and prints, for every K = auto reply, its ratio to the baseline beside it and its
cycles: `.` a cycle that drafted nothing (plain or held), `[m8:3/4 52]` drafter `m`odel (or
`s`uffix, `n`gram) given K = 8, 3 of 4 drafted tokens accepted, 52 ms. A reply whose cycles are
all dots shows the machine's own noise; a probe of a held draft shows as one dear cycle.

    python scripts/trace_rounds.py TARGET.gguf DRAFT.gguf --temperature 1.0 --tokens 64 --rounds 7 --kinds poem

Wall-clock figures: run it on an otherwise idle machine (docs/BENCHMARKS.md, "Never slower").
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from pair_script import load_pair, pair_parser  # scripts/, beside this file (the script's own folder is on the path)
from sweep_never_slower import KINDS, PROMPTS

from spectui import argtypes
from spectui.bench import WARM_UP_TOKENS, Workload, round_order, round_workload, workload
from spectui.engine.events import CycleStats, Progress
from spectui.engine.generation_config import AUTO, DraftLength
from spectui.engine.generator import Generator
from spectui.session.reply import ReplyDone, run_reply


def cycle_mark(cycle: CycleStats) -> str:
    if not cycle.drafted:
        return "."
    return f"[{cycle.source[:1]}{cycle.k}:{cycle.accepted}/{cycle.drafted} {cycle.seconds * 1e3:.0f}]"


def one_reply(gen: Generator, work: Workload, prompt: str, k: DraftLength) -> tuple[float, str]:
    """The reply's decode tokens per second and its cycles, one mark each."""
    gen.reset()
    marks = []
    for event in run_reply(gen, work.chat_format, work.request(prompt, k)):
        if isinstance(event, Progress):
            marks.append(cycle_mark(event.cycle))
        elif isinstance(event, ReplyDone):
            return event.stats.decode_tps, "".join(marks)
    raise SystemExit("trace_rounds: a reply ended without its totals")


def main() -> None:
    parser = pair_parser(__doc__.splitlines()[0], temperature=1.0, tokens=64, threads=2)
    parser.add_argument("--rounds", type=argtypes.repeat, default=7)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"of {', '.join(KINDS)}")
    args = parser.parse_args()
    kinds = [kind for kind in KINDS if kind in args.kinds.split(",")]
    if not kinds:
        raise SystemExit(f"trace_rounds: --kinds takes some of {', '.join(KINDS)}")
    gen, config = load_pair(args)
    config = replace(config, sampling=replace(config.sampling, seed=0))  # bench's seed
    work = workload(gen, [PROMPTS[KINDS.index(kind)] for kind in kinds], config, None)
    one_reply(gen, replace(work, config=replace(config, max_tokens=WARM_UP_TOKENS)), work.prompts[0], AUTO)
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds}
    for round_no in range(1, args.rounds + 1):
        this_round = round_workload(work, round_no)
        for kind, prompt in zip(kinds, this_round.prompts, strict=True):
            replies = {k: one_reply(gen, this_round, prompt, k) for k in round_order([AUTO], round_no)}
            (off, _), (auto, marks) = replies[0], replies[AUTO]
            ratios[kind].append(auto / off if off else 0.0)
            print(f"round {round_no} {kind:8} {ratios[kind][-1]:.3f}x (off {off:.1f}, auto {auto:.1f} tok/s) {marks}",
                  flush=True)
    for kind in kinds:
        print(f"{kind:8} median {statistics.median(ratios[kind]):.3f}x  rounds",
              " ".join(f"{r:.2f}" for r in ratios[kind]))
    gen.close()


if __name__ == "__main__":
    main()
