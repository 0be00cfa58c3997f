"""The draftless drafters against the draft model and against llama.cpp's C++, in one run.

    .venv/bin/python scripts/bench_lookup.py                       # the demo-base pair (issue #13's targets)
    .venv/bin/python scripts/bench_lookup.py --tiny                # the tiny test pair: checks the script
    .venv/bin/python scripts/bench_lookup.py --llama-bin PATH      # llama-speculative-simple to compare with
                                                                   # (default: scripts/build_llama_cpp.sh's)

For each workload below it runs `spectui bench --repeat R --json` once per drafter (`model`,
`model+suffix`, `model+ngram`, `suffix`, `ngram`) at T = 0 (`-k 5,auto`) and at T = 0.8
(`-k auto`); every call measures its own speculation-off baseline, interleaved with the
speculative runs, so each speed-up is against the baseline of its own rounds. Then
llama.cpp's `llama-speculative-simple` runs the same rendered prompts with the same draft
(`--spec-type draft-simple`, `ngram-simple,draft-simple`, `ngram-mod,draft-simple`, K = 5),
R times each. Finally it prints issue #13's target ratios, each with the figures behind it,
and writes everything to `--out` (JSON).

The workloads. The demo target is a *base* model with no chat template: `spectui bench` sends it
each prompt as plain text to continue (completion mode; before that mode existed it framed
the text as "User: ...\n\nAssistant:" and the replies below do not happen). Each prompt is
chosen for what this model writes after it at T = 0:
  code    "Rewrite this Python module with type hints, keeping every line of logic.", the
          ~40-line module below in a ```python block, then "The same module with type hints:"
          and an opened ```python block: the model writes the module out again (without hints):
          a faithful continuation repeats the code.
  repeat  "A training plan for a beginner runner, one line per day, for four weeks.\n\nWeek 1
          \nMonday:": a long answer that repeats itself ("Tuesday: 100m, 100m, ..." week after week).
  story   four story openings, 48 tokens each: open prose while it lasts (this 270M model's greedy
          prose falls into loops after about 40 tokens, so use --target/--draft with a real chat
          pair for a stronger check that a lookup never costs speed).
llama.cpp gets exactly the text spectui tokenizes (`ChatFormat.render`), as a file; it has no
stop strings, so where spectui stops early it decodes on to the token limit: tokens/sec is
what is compared.

Run it on a quiet machine (it takes 20-30 minutes on 2 cores); compare figures only within
one run. Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
DRAFTERS = ("model", "model+suffix", "model+ngram", "suffix", "ngram")
LLAMA_TYPES = ("draft-simple", "ngram-simple,draft-simple", "ngram-mod,draft-simple")
LLAMA_K = 5
SAMPLED_T = 0.8

MODULE = '''import json
import os


class Inventory:
    def __init__(self, path):
        self.path = path
        self.items = {}
        if os.path.exists(path):
            with open(path) as handle:
                self.items = json.load(handle)

    def add(self, name, count):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError("not enough " + name)
        if count == have:
            del self.items[name]
        else:
            self.items[name] = have - count

    def total(self):
        return sum(self.items.values())

    def low_stock(self, threshold):
        return sorted(name for name, count in self.items.items() if count < threshold)

    def save(self):
        with open(self.path, "w") as handle:
            json.dump(self.items, handle, indent=2, sort_keys=True)


def restock(inventory, orders):
    for name, count in orders:
        inventory.add(name, count)
    inventory.save()
    return inventory.total()
'''
STORY_TOKENS = 48
"""Tokens per story: the demo's greedy prose falls into loops after about 40 tokens."""


@dataclass(frozen=True)
class Workload:
    texts: list[str]
    max_tokens: int | None = None
    """None: --max-tokens."""


WORKLOADS: dict[str, Workload] = {
    "code": Workload([f"Rewrite this Python module with type hints, keeping every line of logic.\n\n```python\n"
                      f"{MODULE}```\n\nThe same module with type hints:\n\n```python\n"]),
    "repeat": Workload(["A training plan for a beginner runner, one line per day, for four weeks.\n\nWeek 1\nMonday:"]),
    "story": Workload([
        "Once upon a time, on a rocky island far from the coast, there lived an old lighthouse keeper named Tom. "
        "One grey morning in November, he walked down to the shore and",
        "The old fisherman looked at the dark clouds over the harbour. He knew the storm would come before night, "
        "but his son was still out at sea, so he",
        "Lily found the map in a box under the attic window. It was drawn in brown ink on thick paper, and in one "
        "corner someone had written",
        "Every summer the circus came to our village, and every summer my grandmother told the same story about "
        "the elephant who",
    ], STORY_TOKENS),
}


@dataclass(frozen=True)
class Setup:
    target: Path
    draft: Path
    max_tokens: int
    repeat: int
    threads: int
    llama_bin: Path | None
    workloads: dict[str, Workload] = field(default_factory=dict)


# ----- spectui ------------------------------------------------------------------------------------


def spectui_rows(setup: Setup, work: Workload, drafter: str, temperature: float, ks: str) -> list[dict]:
    """`spectui bench --json` in its own process: one row per K."""
    command = [sys.executable, "-m", "spectui", "bench", "--target", str(setup.target), "--drafter", drafter,
               "-k", ks, "--temperature", str(temperature), "--seed", "0", "--repeat", str(setup.repeat),
               "--max-tokens", str(work.max_tokens or setup.max_tokens), "--threads", str(setup.threads), "--json"]
    if "model" in drafter.split("+"):
        command += ["--draft", str(setup.draft)]
    for text in work.texts:
        command += ["--prompt", text]
    print(f"  spectui bench --drafter {drafter} -k {ks} --temperature {temperature} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"spectui bench failed ({drafter}, T={temperature}):\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


# ----- llama.cpp --------------------------------------------------------------------------------


def rendered_prompts(target: Path, texts: list[str]) -> list[str]:
    """Exactly the text spectui tokenizes for each prompt (the model's chat format, one user turn)."""
    from spectui.chat.template import ChatFormat, ChatMessage
    from spectui.engine.model.llama_model import LlamaModel

    with LlamaModel.load(target, n_ctx=256) as model:
        chat_format = ChatFormat.from_model(model)
        return [chat_format.render([ChatMessage("user", text)]) for text in texts]


DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
ACCEPTED = re.compile(r"n_drafted\s*=\s*(\d+).*?n_accept\s*=\s*(\d+)", re.S)


def llama_run(setup: Setup, prompt_file: Path, spec_type: str, temperature: float,
              max_tokens: int) -> tuple[int, float, int, int]:
    """One `llama-speculative-simple` run: (decoded tokens, seconds, drafted, accepted)."""
    assert setup.llama_bin is not None
    command = [str(setup.llama_bin), "-m", str(setup.target), "-md", str(setup.draft), "-f", str(prompt_file),
               "-n", str(max_tokens), "-c", "4096", "-t", str(setup.threads), "--seed", "0",
               "--temp", str(temperature), "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
               "--spec-type", spec_type, "--spec-draft-n-max", str(LLAMA_K)]
    done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace")
    output = done.stdout + done.stderr
    decoded = DECODED.search(output)
    if done.returncode != 0 or decoded is None:
        raise SystemExit(f"llama-speculative-simple failed ({spec_type}):\n{output[-2000:]}")
    counts = ACCEPTED.search(output)
    drafted, accepted = (int(counts.group(1)), int(counts.group(2))) if counts else (0, 0)
    return int(decoded.group(1)), float(decoded.group(2)), drafted, accepted


def llama_rows(setup: Setup, work: Workload, temperature: float, workdir: Path) -> list[dict]:
    """Per spec type: tokens/sec over all prompts, median over `repeat` rounds (interleaved)."""
    files = []
    for i, text in enumerate(rendered_prompts(setup.target, work.texts)):
        path = workdir / f"prompt{i}.txt"
        path.write_text(text)
        files.append(path)
    rounds: dict[str, list[tuple[int, float, int, int]]] = {t: [] for t in LLAMA_TYPES}
    for _ in range(setup.repeat):
        for spec_type in LLAMA_TYPES:
            print(f"  llama-speculative-simple --spec-type {spec_type} --temp {temperature} ...", file=sys.stderr,
                  flush=True)
            runs = [llama_run(setup, f, spec_type, temperature, work.max_tokens or setup.max_tokens) for f in files]
            rounds[spec_type].append(tuple(sum(r[i] for r in runs) for i in range(4)))  # type: ignore[arg-type]
    rows = []
    for spec_type, totals in rounds.items():
        rows.append({"spec_type": spec_type, "k": LLAMA_K, "temperature": temperature,
                     "tps": round(median(t / s for t, s, _, _ in totals if s > 0), 2),
                     "acceptance_rate": round(sum(a for *_, a in totals) / max(1, sum(d for *_, d, _ in totals)), 4)})
    return rows


# ----- the run and the targets -----------------------------------------------------------------


def run(setup: Setup) -> dict:
    results: dict = {"target": str(setup.target), "draft": str(setup.draft), "repeat": setup.repeat,
                     "max_tokens": setup.max_tokens, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, work in setup.workloads.items():
            print(f"workload {name} ({len(work.texts)} prompt(s))", file=sys.stderr, flush=True)
            spectui = {drafter: spectui_rows(setup, work, drafter, 0.0, "5,auto") for drafter in DRAFTERS}
            sampled = {drafter: spectui_rows(setup, work, drafter, SAMPLED_T, "auto") for drafter in DRAFTERS}
            entry = {"prompts": work.texts, "max_tokens": work.max_tokens or setup.max_tokens,
                     "t0": spectui, "t0.8": sampled}
            if setup.llama_bin is not None:
                entry["llama_t0"] = llama_rows(setup, work, 0.0, Path(tmp))
            results["workloads"][name] = entry
    results["targets"] = targets(results)
    return results


def row(rows: list[dict], k: int | str) -> dict:
    return next(r for r in rows if r["k"] == k)


def targets(results: dict) -> list[dict]:
    """Issue #13's ratios, as measured in this run (`ok` says whether each target is met)."""
    checks = []

    def check(what: str, value: float, goal: float, detail: str) -> None:
        checks.append({"target": what, "value": round(value, 3), "goal": goal, "ok": value >= goal,
                       "detail": detail})

    for name, entry in results["workloads"].items():
        for k in (5, "auto"):
            both = row(entry["t0"]["model+suffix"], k)
            alone = row(entry["t0"]["model"], k)
            versus_model = both["speedup"] / alone["speedup"] if alone["speedup"] else 0.0
            detail = (f"model+suffix {both['speculative_tps']} tok/s ({both['speedup']}x its baseline "
                      f"{both['baseline_tps']}), model {alone['speculative_tps']} tok/s ({alone['speedup']}x)")
            if name in ("code", "repeat"):
                check(f"{name}, T=0, K={k}: model+suffix vs speculation off >= 2.5x", both["speedup"], 2.5, detail)
                check(f"{name}, T=0, K={k}: model+suffix vs model >= 1.3x", versus_model, 1.3, detail)
            else:
                check(f"{name}, T=0, K={k}: model+suffix vs model >= 0.97x", versus_model, 0.97, detail)
            if "llama_t0" in entry:
                best = max((r for r in entry["llama_t0"] if r["spec_type"] != "draft-simple"), key=lambda r: r["tps"])
                check(f"{name}, T=0, K={k}: model+suffix vs llama.cpp {best['spec_type']} (K={LLAMA_K}) >= 1.2x",
                      both["speculative_tps"] / best["tps"] if best["tps"] else 0.0, 1.2,
                      f"model+suffix {both['speculative_tps']} tok/s, llama.cpp {best['tps']} tok/s")
        both, alone = row(entry["t0.8"]["model+suffix"], "auto"), row(entry["t0.8"]["model"], "auto")
        check(f"{name}, T=0.8, K=auto: model+suffix vs model >= 1.0x",
              both["speedup"] / alone["speedup"] if alone["speedup"] else 0.0, 1.0,
              f"model+suffix {both['speculative_tps']} tok/s ({both['speedup']}x), "
              f"model {alone['speculative_tps']} tok/s ({alone['speedup']}x)")
    return checks


def print_report(results: dict) -> None:
    for name, entry in results["workloads"].items():
        print(f"\n== {name}")
        print(f"{'drafter':14} {'T':>4} {'K':>5} {'tok/s':>8} {'speedup':>8} {'accept':>7} {'tok/pass':>8}  "
              "per drafter (accepted/proposed)")
        for temperature in ("t0", "t0.8"):
            for drafter, rows in entry[temperature].items():
                for r in rows:
                    members = ", ".join(f"{s} {f['accepted']}/{f['proposed']}" for s, f in r["by_drafter"].items())
                    print(f"{drafter:14} {r['temperature']:>4} {r['k']!s:>5} {r['speculative_tps']:>8.1f} "
                          f"{r['speedup']:>7.2f}x {r['acceptance_rate']:>7.1%} {r['mean_accepted']:>8.2f}  {members}")
        for r in entry.get("llama_t0", []):
            print(f"{'llama.cpp':14} {r['temperature']:>4} {r['k']!s:>5} {r['tps']:>8.1f} {'':>8} "
                  f"{r['acceptance_rate']:>7.1%} {'':>8}  --spec-type {r['spec_type']}")
    print("\n== issue #13 targets (ratios measured in this run)")
    for c in results["targets"]:
        verdict = "ok " if c["ok"] else "NO "
        print(f"{verdict} {c['value']:>6.2f} (goal {c['goal']})  {c['target']}\n       {c['detail']}")


def tiny_pair() -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    import tiny_gguf

    directory = Path(tempfile.mkdtemp(prefix="spectui-tiny-"))
    pair = tiny_gguf.write_pair(directory)
    return pair.target, pair.draft


def default_llama_bin(name: str = "llama-speculative-simple") -> Path | None:
    """A llama.cpp tool built by scripts/build_llama_cpp.sh (SPECTUI_LLAMA_BUILD: another build)."""
    cache = Path(os.environ.get("SPECTUI_LLAMA_BUILD", Path.home() / ".cache/spectui/llama.cpp-0.3.36"))
    binary = cache / "build/bin" / name
    return binary if binary.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, help="another target GGUF (default: the demo pair's)")
    parser.add_argument("--draft", type=Path, help="its draft GGUF (with --target)")
    parser.add_argument("--tiny", action="store_true",
                        help="the tiny test pair, one prompt per workload, 32 tokens, 1 round: checks the script")
    parser.add_argument("--repeat", type=int, default=None, help="rounds per measurement (default 3; --tiny 1)")
    parser.add_argument("--max-tokens", type=int, default=None, help="tokens per reply (default 256; --tiny 32)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--llama-bin", type=Path, default=None,
                        help="llama-speculative-simple (default: the one scripts/build_llama_cpp.sh built)")
    parser.add_argument("--no-llama", action="store_true", help="skip llama.cpp")
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS), help="only these (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.target:
        if args.draft is None:
            parser.error("--target needs --draft (the drafters compared include the draft model)")
        target, draft = args.target, args.draft
    elif args.tiny:
        target, draft = tiny_pair()
    else:
        from spectui.catalog.demo import ensure_demo_pair

        pair = ensure_demo_pair("demo-base")
        target, draft = pair.target, pair.draft
    llama_bin = None if args.no_llama else (args.llama_bin or default_llama_bin())
    if llama_bin is None and not args.no_llama:
        print("no llama-speculative-simple found: run scripts/build_llama_cpp.sh (or pass --llama-bin / --no-llama)",
              file=sys.stderr)
    workloads = {name: Workload(work.texts[:1], None) if args.tiny else work for name, work in WORKLOADS.items()
                 if not args.workload or name in args.workload}
    setup = Setup(target, draft, args.max_tokens or (32 if args.tiny else 256), args.repeat or (1 if args.tiny else 3),
                  args.threads, llama_bin, workloads)
    results = run(setup)
    print_report(results)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
        print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
