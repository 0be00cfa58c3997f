"""What K = auto chose, cycle by cycle, and what it believed when it chose (issue #35's diagnosis).

Loads a pair, runs one prompt with speculation off then with K = auto (interleaved, `--rounds`
times), and prints per K = auto cycle (JSON lines): the K given, the proposal (nodes `d`,
accepted `a`, emitted `e`, branches `br`), its draft + verify seconds (`sec`) and wall time
between cycles (`wall`, ms), the host's share, and K = auto's figures at that point: v(1),
the drafter's c_call and c_unit (ms), its acceptance, the speed-up it predicted at the K it
picked, and why it held back (if it did). Then the verify table and each drafter's figures.

    python scripts/probe_k_auto.py TARGET.gguf DRAFT.gguf --temperature 0.8 --tokens 128 --threads 1
"""

from __future__ import annotations

import json
import statistics
import time

from pair_script import load_pair, pair_parser  # scripts/, beside this file (the script's own folder is on the path)

from spectui import argtypes
from spectui.bench import workload
from spectui.engine.events import Finished, Progress
from spectui.engine.generation_config import AUTO, DraftControl, DraftLength
from spectui.session.reply import prepare

STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def main() -> None:
    parser = pair_parser(__doc__.splitlines()[0], temperature=0.8, tokens=128, threads=1)
    parser.add_argument("--drafter", default="auto")
    parser.add_argument("--rounds", type=argtypes.repeat, default=2)
    parser.add_argument("--prompt", default=STORY)
    args = parser.parse_args()
    gen, config = load_pair(args, args.drafter)
    work = workload(gen, [args.prompt], config, None)
    tokens = prepare(gen, work.chat_format, work.request(args.prompt, 0)).tokens
    auto = gen.auto(config.sampling.greedy)

    def run(k: DraftLength) -> tuple[list[dict[str, object]], Finished]:
        gen.reset()
        rows: list[dict[str, object]] = []
        last, finished = time.perf_counter(), None
        for event in gen.generate(tokens, config, DraftControl(k)):
            if isinstance(event, Progress):
                now, cycle = time.perf_counter(), event.cycle
                row: dict[str, object] = {
                    "k": cycle.k, "src": cycle.source, "d": cycle.drafted, "a": cycle.accepted, "e": cycle.emitted,
                    "br": cycle.branches, "sec": round(cycle.seconds * 1e3, 2), "wall": round((now - last) * 1e3, 2),
                    "host": round(cycle.host.host * 1e3, 2), "held": cycle.held.describe() if cycle.held else None}
                last = now
                if cycle.source:
                    figures = auto.of(cycle.source)
                    c_call, c_unit = figures.cost.coefficients()
                    row.update(v1=round(auto.verify_cost(1) * 1e3, 2), ccall=round(c_call * 1e3, 2),
                               cunit=round(c_unit * 1e3, 2), acc=round(figures.acceptance, 3), lastk=figures.last_k,
                               pred=round(auto.expected_speedup(cycle.source, max(figures.last_k, 1)), 3))
                rows.append(row)
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None
        return rows, finished

    run(2)  # first touch
    try:
        for round_no in range(args.rounds):
            off_rows, off = run(0)
            on_rows, on = run(AUTO)
            print(f"round {round_no}: off {off.stats.decode_tps:.1f} tok/s, auto {on.stats.decode_tps:.1f} tok/s, "
                  f"ratio {on.stats.decode_tps / off.stats.decode_tps:.2f}; off per-cycle ms (median) "
                  f"{statistics.median(float(r['sec']) for r in off_rows):.1f}")  # type: ignore[arg-type]
            for row in on_rows:
                print(json.dumps(row))
            print("  verify table (ms)", {k: round(v * 1e3, 2) for k, v in sorted(auto.verify.table().items())})
            for source, figures in auto.figures.items():
                print(f"  {source}: cost (ms) {[round(x * 1e3, 2) for x in figures.cost.coefficients()]}, "
                      f"acceptance {figures.acceptance:.3f}, by position "
                      f"{[round(x, 2) for x in figures.position_acceptances(8)]}, best {auto.best_speedup(source)}")
    finally:
        gen.close()


if __name__ == "__main__":
    main()
