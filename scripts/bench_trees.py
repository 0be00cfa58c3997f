"""Token trees and the other levers at T > 0, each measured on its own, in one process.

    .venv/bin/python scripts/bench_trees.py                 # demo-base pair, T = 0.8, 256 tokens x 5 rounds
    .venv/bin/python scripts/bench_trees.py --tiny --max-tokens 24 --repeat 1     # checks the script
    .venv/bin/python scripts/bench_trees.py --rpc-delay 20  # the target on two `spectui worker`s, +20 ms RTT

One generator is loaded once; every round runs each variant on every prompt (the speculation-off
baseline first), interleaved, and each variant's speed-up is taken against the baseline of its
own round. When sampling, round i samples with seed + i - 1 for every variant, as `spectui
bench` does. The variants (`--variants`, comma-separated):

  off        speculation off (K = 0): the baseline, always run
  k5         a fixed chain of 5
  chain      K = auto as before this issue: k from per-position averages, no plan
  priced     K = auto with a plan: every token priced by the draft's own confidence (draftplan.py),
             chains only (the "better K chooser" lever)
  tree       priced, and candidates beside a token wherever they pay (the default of K = auto)
  q0.6       `priced` with the draft's q at temperature 0.6 (any q is exact; the lever is
             acceptance); q0.5, q0.7, ... likewise

`--frozen-costs` first times a target pass of 1..32 rows and a draft pass (the fastest of many
tries: what the machine does undisturbed), then freezes K = auto's cost figures at those values,
so its choices are the ones a quiet machine would make, and also reports each variant's speed-up
*modelled* from the work it did (draft passes and verify rows, priced at those costs; host time
left out). On a shared machine that is the figure to compare: the wall-clock one is noise.

`--llama` also runs llama.cpp's `llama-speculative-simple` (one chain, K = 5) and
`llama-speculative` (branches: `-np N --draft-p-split P`, stochastic acceptance) on the same
rendered prompts at the same sampling, interleaved with the rounds, for the issue's "best
llama.cpp configuration" ratio. `--calibrate` prints what K = auto learned: the chance of
acceptance by the draft's confidence (draftplan.py's priors come from such a run).

Nothing here is a test: it measures. Run it on a quiet machine; figures compare only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
LLAMA_BUILD = Path(os.environ.get("SPECTUI_LLAMA_BUILD", Path.home() / ".cache/spectui/llama.cpp-0.3.36")) / "build/bin"
LLAMA_CONFIGS = {  # name -> (binary, extra arguments)
    "simple K=5": ("llama-speculative-simple", ["--spec-type", "draft-simple", "--spec-draft-n-max", "5"]),
    "simple K=8": ("llama-speculative-simple", ["--spec-type", "draft-simple", "--spec-draft-n-max", "8"]),
    "tree np=2 p_split=0.1 K=5": ("llama-speculative", ["-np", "2", "--draft-p-split", "0.1",
                                                         "--spec-draft-n-max", "5"]),
    "tree np=4 p_split=0.1 K=5": ("llama-speculative", ["-np", "4", "--draft-p-split", "0.1",
                                                         "--spec-draft-n-max", "5"]),
    "chain np=1 K=5": ("llama-speculative", ["-np", "1", "--spec-draft-n-max", "5"]),
}
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")


def setup_variant(gen, name: str) -> tuple[object, str]:
    """Configure the generator for a variant; returns its K and a label."""
    sampled = gen.auto(False)
    drafter = gen.drafters.get("model")
    sampled.planning, sampled.trees = True, True
    if drafter is not None:
        drafter.q_temperature = None
    if name == "off":
        return 0, "speculation off"
    if name == "k5":
        return 5, "fixed chain K=5"
    if name == "chain":
        sampled.planning = False
        return "auto", "K=auto, k from averages (before #25)"
    if name == "priced":
        sampled.trees = False
        return "auto", "K=auto, each token priced (chains)"
    if name == "tree":
        return "auto", "K=auto, priced, trees where they pay"
    if name.startswith("q"):
        sampled.trees = False
        if drafter is not None:
            drafter.q_temperature = float(name[1:])
        return "auto", f"priced chains, draft q at T={name[1:]}"
    raise SystemExit(f"unknown variant {name!r}")


def run_variant(gen, work, name: str, round_no: int, costs: Costs | None = None) -> dict:
    from spectui.bench import round_workload, run_all

    k, _ = setup_variant(gen, name)
    cycles.clear()
    totals = run_all(gen, round_workload(work, round_no), k)
    result = {"tps": totals.tps, "tokens": totals.tokens, "passes": totals.passes, "drafted": totals.drafted,
              "accepted": totals.accepted, "seconds": totals.seconds, "trees": totals.tree_cycles,
              "tree_nodes": totals.tree_nodes, "tree_branches": totals.tree_branches}
    if costs is not None:
        result["modelled_seconds"] = sum(costs.draft * work + costs.verify(rows) for work, rows in cycles)
    return result


# ----- costs frozen at what an undisturbed machine does -------------------------------------------

cycles: list[tuple[int, int]] = []
"""(draft passes, verify rows) of every cycle of the variant running now."""


def record_cycles() -> None:
    """Count each cycle's work (wraps the step the generator calls)."""
    from spectui.engine import generator

    step = generator.speculative_step

    def counted(*args, **kwargs):
        result = step(*args, **kwargs)
        cycles.append((result.proposal.work, result.drafted + 1))
        return result

    generator.speculative_step = counted


class Costs:
    """Seconds of a target pass by rows and of one draft pass, the fastest of `tries` each."""

    def __init__(self, gen, tries: int) -> None:
        sys.path.insert(0, str(ROOT / "scripts"))
        from chain_ceiling import pass_costs

        target, draft = gen.target, gen.drafters["model"].model
        prefix = target.tokenize("The quick brown fox jumps over the lazy dog. " * 30)[:200]
        self.rows, self.draft = pass_costs(target, draft, prefix, tries, (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32))
        gen.reset()

    def verify(self, rows: int) -> float:
        known = sorted(self.rows)
        below = max((n for n in known if n <= rows), default=known[0])
        above = min((n for n in known if n >= rows), default=known[-1])
        if below == above:
            return self.rows[below]
        return self.rows[below] + (self.rows[above] - self.rows[below]) * (rows - below) / (above - below)

    def freeze(self, gen) -> None:
        """K = auto prices with these figures and learns no others (acceptance it still learns)."""

        class Frozen:
            def __init__(self, costs: Costs) -> None:
                self._table = {n: costs.verify(n) for n in range(1, 33)}

            def add(self, rows: int, seconds: float) -> None:
                pass

            def __bool__(self) -> bool:
                return True

            def table(self) -> dict[int, float]:
                return self._table

            def seconds(self, rows: int) -> float:
                return self._table[min(max(rows, 1), 32)]

            def row_seconds(self) -> float | None:
                return (self._table[32] - self._table[1]) / 31

        class FrozenDraft:
            n = x = 1.0  # measured: one pass's worth of work

            def __init__(self, per_pass: float) -> None:
                self.per_pass = per_pass

            def add(self, work: float, seconds: float) -> None:
                pass

            def coefficients(self) -> tuple[float, float]:
                return 0.0, self.per_pass

        for greedy in (True, False):
            auto = gen.auto(greedy)
            auto.verify = Frozen(self)
            auto.of("model").cost = FrozenDraft(self.draft)


def llama_run(binary: str, extra: list[str], target: Path, draft: Path, prompt: Path, args,
              seed: int) -> tuple[int, float] | str:
    """(tokens decoded, seconds), or the tail of the tool's output when it failed."""
    command = [str(LLAMA_BUILD / binary), "-m", str(target), "-md", str(draft), "-f", str(prompt),
               "-n", str(args.max_tokens), "-c", "4096", "-t", str(args.threads), "--seed", str(seed),
               "--temp", str(args.temperature), "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05", *extra]
    done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace")
    decoded = DECODED.search(done.stdout + done.stderr)
    if done.returncode != 0 or decoded is None:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        return f"{binary} exited {done.returncode}: " + " | ".join(tail)
    return int(decoded.group(1)), float(decoded.group(2))


def summarize(rounds: dict[str, list[dict]]) -> list[dict]:
    rows = []
    bases = rounds["off"]
    for name, runs in rounds.items():
        ratios = [r["tps"] / b["tps"] for r, b in zip(runs, bases, strict=False) if b["tps"]]
        passes = sum(r.get("passes", 0) for r in runs)
        trees = sum(r.get("trees", 0) for r in runs)
        rows.append({
            "variant": name, "tok_s": round(median(r["tps"] for r in runs), 2),
            "speedup": round(median(ratios), 3) if ratios else None,
            "speedup_min": round(min(ratios), 3) if ratios else None,
            "speedup_max": round(max(ratios), 3) if ratios else None,
            "tokens_per_pass": round(sum(r.get("tokens", 0) for r in runs) / passes, 3) if passes else None,
            "acceptance": round(sum(r.get("accepted", 0) for r in runs)
                                / max(1, sum(r.get("drafted", 0) for r in runs)), 3),
            "tree_cycles": round(trees / passes, 3) if passes else 0.0,
            "tree_nodes": round(sum(r.get("tree_nodes", 0) for r in runs) / trees, 2) if trees else 0.0,
            "tree_branches": round(sum(r.get("tree_branches", 0) for r in runs) / trees, 2) if trees else 0.0,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the test suite's tiny pair (checks the script)")
    parser.add_argument("--pair", default="demo-base", choices=("demo-base", "demo"))
    parser.add_argument("--variants", default="chain,priced,tree,q0.6")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="default: all cores (1 on a busy machine)")
    parser.add_argument("--prompt", action="append", help="prompts (default: spectui bench's three)")
    parser.add_argument("--rpc-delay", type=float, default=None, help="the target on 2 local workers, +D ms RTT")
    parser.add_argument("--llama", action="store_true", help="also llama.cpp's speculative tools")
    parser.add_argument("--calibrate", action="store_true", help="print K = auto's confidence tables")
    parser.add_argument("--frozen-costs", type=int, default=0, metavar="TRIES",
                        help="time the costs (fastest of TRIES), freeze K = auto's at them, model speed-ups")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from spectui.bench import DEFAULT_PROMPTS, workload
    from spectui.engine.generation_config import GenerationConfig, SamplingConfig
    from spectui.engine.generator import load_generator

    if args.tiny:
        sys.path.insert(0, str(ROOT / "tests"))
        import tiny_gguf

        pair = tiny_gguf.write_pair(Path(tempfile.mkdtemp(prefix="spectui-trees-")))
        target, draft = pair.target, pair.draft
    else:
        from spectui.catalog import demo

        built = demo.ensure_demo_pair(args.pair)
        target, draft = Path(built.target), Path(built.draft)
    threads = args.threads or os.cpu_count() or 1
    names = ["off", *(v for v in args.variants.split(",") if v and v != "off")]
    sampling = SamplingConfig(temperature=args.temperature, top_k=40, top_p=0.95, min_p=0.05, seed=0)
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    llama: dict[str, list[float]] = {name: [] for name in LLAMA_CONFIGS} if args.llama else {}
    llama_failed: dict[str, str] = {}
    with ExitStack() as stack:
        rpc = None
        if args.rpc_delay is not None:
            sys.path.insert(0, str(ROOT / "scripts"))
            from bench_rpc import workers

            rpc = stack.enter_context(workers(2, max(1, threads // 2)))
        gen = load_generator(target, draft, n_ctx=4096, n_threads=threads, rpc=rpc)
        stack.callback(gen.close)
        if args.rpc_delay is not None:
            gen.target.rpc.set_delay(args.rpc_delay / 1000)
        texts = args.prompt or list(DEFAULT_PROMPTS)
        work = workload(gen, texts, GenerationConfig(max_tokens=args.max_tokens, sampling=sampling), "model")
        prompt_files = write_prompts(target, texts) if args.llama else []
        record_cycles()
        costs = None
        if args.frozen_costs:
            print("timing a target pass by rows and a draft pass ...", file=sys.stderr, flush=True)
            costs = Costs(gen, args.frozen_costs)
        warm = replace(work, prompts=work.prompts[:1], config=replace(work.config, max_tokens=16))
        for name in names:  # first touch of every batch shape and model
            run_variant(gen, warm, name, 1)
        if costs is not None:
            costs.freeze(gen)
        for round_no in range(1, args.repeat + 1):
            for name in names:
                print(f"round {round_no}/{args.repeat}: {name} ...", file=sys.stderr, flush=True)
                rounds[name].append(run_variant(gen, work, name, round_no, costs))
            for name, (binary, extra) in LLAMA_CONFIGS.items() if args.llama else ():
                if name in llama_failed:  # a tool that crashed on these files is not run again
                    continue
                print(f"round {round_no}/{args.repeat}: llama.cpp {name} ...", file=sys.stderr, flush=True)
                runs = [llama_run(binary, extra, target, draft, f, args, round_no - 1) for f in prompt_files]
                if failed := next((r for r in runs if isinstance(r, str)), None):
                    print(f"  failed: {failed}", file=sys.stderr)
                    llama_failed[name] = failed
                    continue
                llama[name].append(sum(t for t, _ in runs) / sum(s for _, s in runs))
        calibration = gen.auto(sampling.greedy).of("model").by_confidence
    rows = summarize(rounds)
    if costs is not None:
        for row in rows:
            runs = rounds[row["variant"]]
            tokens = sum(r["tokens"] for r in runs)
            base = sum(r["tokens"] for r in rounds["off"]) / sum(r["modelled_seconds"] for r in rounds["off"])
            row["modelled_speedup"] = round(tokens / sum(r["modelled_seconds"] for r in runs) / base, 3)
    result = {"target": str(target), "draft": str(draft), "threads": threads, "temperature": args.temperature,
              "max_tokens": args.max_tokens, "repeat": args.repeat, "rpc_delay_ms": args.rpc_delay,
              "machine": f"{platform.machine()} {os.cpu_count()} cores", "rows": rows,
              "llama_cpp": {name: round(median(v), 2) for name, v in llama.items() if v},
              "llama_cpp_failed": llama_failed,
              "llama_cpp_rounds": llama,
              "frozen_costs": None if costs is None else {"verify_rows_s": costs.rows, "draft_pass_s": costs.draft}}
    if args.calibrate:
        result["calibration"] = {"first": _table(calibration.first), "later": _table(calibration.later)}
    print_report(result)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


def _table(table) -> list[dict]:
    pairs = enumerate(zip(table.hits, table.trials, strict=True))
    return [{"bucket": f"{b / 10:.1f}-{(b + 1) / 10:.1f}", "judged": round(t, 1),
             "accepted": round(h / t, 3) if t else None} for b, (h, t) in pairs]


def write_prompts(target: Path, texts: list[str]) -> list[Path]:
    from spectui.chat.template import ChatFormat, ChatMessage
    from spectui.engine.model.llama_model import LlamaModel

    folder = Path(tempfile.mkdtemp(prefix="spectui-trees-prompts-"))
    with LlamaModel.load(target, n_ctx=256) as model:
        fmt = ChatFormat.from_model(model)
        files = []
        for i, text in enumerate(texts):
            files.append(folder / f"prompt{i}.txt")
            files[-1].write_text(fmt.render([ChatMessage("user", text)]))
    return files


def print_report(result: dict) -> None:
    print(f"{'variant':>8} {'tok/s':>7} {'speedup':>8} {'rounds':>13} {'modelled':>8} {'tok/pass':>8} {'accept':>7} "
          f"{'trees':>6} {'nodes':>6} {'branches':>8}")
    for r in result["rows"]:
        spread = f"{r['speedup_min']:.2f}-{r['speedup_max']:.2f}x" if r["speedup"] else "-"
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        per_pass = f"{r['tokens_per_pass']:.2f}" if r["tokens_per_pass"] else "-"
        modelled = f"{r['modelled_speedup']:.2f}x" if "modelled_speedup" in r else "-"
        print(f"{r['variant']:>8} {r['tok_s']:7.1f} {speedup:>8} {spread:>13} {modelled:>8} {per_pass:>8} "
              f"{r['acceptance']:>7.1%} "
              f"{r['tree_cycles']:>6.0%} {r['tree_nodes']:>6.1f} {r['tree_branches']:>8.1f}")
    for name, tps in result["llama_cpp"].items():
        print(f"llama.cpp {name}: {tps:.1f} tok/s")
    for name, why in result["llama_cpp_failed"].items():
        print(f"llama.cpp {name}: failed ({why})")
    for kind in ("first", "later"):
        for row in result.get("calibration", {}).get(kind, []):
            print(f"calibration {kind} {row['bucket']}: judged {row['judged']}, accepted {row['accepted']}")


if __name__ == "__main__":
    sys.exit(main())
