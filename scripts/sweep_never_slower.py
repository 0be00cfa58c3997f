"""Issue #35's sweep: is K = auto ever slower than speculation off? Pairs x prompts x temperatures.

    python scripts/sweep_never_slower.py --pair demo --pair weak=TARGET.gguf,DRAFT.gguf \
        [--temperatures 0,0.8,1.0] [--repeat 3] [--max-tokens 48] [--threads N] [--out sweep.json]

Each (pair, temperature) is one `spectui bench --json` process: six prompts of different kinds
(a question, code, a story opening, a poem, a list, a reply that loops), speculation off and
K = auto in interleaved rounds, medians over the rounds. Printed: a Markdown table row per
(pair, temperature) with the total's median ratio, its rounds' spread, the worst prompt's median
ratio (`by_prompt`), acceptance, tokens per target pass, and the share of passes K = auto held at
K = 0; then every cell under the goal (0.97x), with the range its rounds spread over (a reply held
at K = 0 throughout reads 0.88-1.08x against its baseline on a 2-core VM: read a cell's median
against its spread). Wall-clock figures: run it on an otherwise idle
machine and read only the ratios (each measured side by side in one process).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

PROMPTS = (
    "How do I sort a list of numbers in Python? Explain briefly.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Write a short poem about the autumn rain.",
    "List ten fruits, one per line.",
    "Repeat the line 'I will not waste chalk.' twenty times.",
)
KINDS = ("question", "code", "story", "poem", "list", "loop")
GOAL = 0.97


def pair_args(spec: str) -> tuple[str, list[str]]:
    """`NAME` (a catalog pair) or `NAME=TARGET,DRAFT` -> (label, bench arguments)."""
    if "=" not in spec:
        return spec, ["--pair", spec]
    label, files = spec.split("=", 1)
    target, _, draft = files.partition(",")
    return label, ["--target", target, *(["--draft", draft] if draft else [])]


def bench(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "spectui", "bench", *args, "--json"]
    print("$ spectui", " ".join(args[:8]), "...", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"sweep_never_slower: bench failed: {done.stderr.strip().splitlines()[-1:]}")
    rows: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return rows[-1]


def rounds(spread: list[float] | None) -> str:
    """` (rounds 0.89-1.12)`: how far one prompt's rounds spread, beside its median."""
    return f" (rounds {spread[0]:.2f}-{spread[1]:.2f})" if spread else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", action="append", required=True, help="NAME or NAME=TARGET,DRAFT (repeatable)")
    parser.add_argument("--temperatures", default="0,0.8,1.0")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    for spec in args.pair:
        label, pair = pair_args(spec)
        for temperature in args.temperatures.split(","):
            cmd = [*pair, "--temperature", temperature, "--max-tokens", str(args.max_tokens),
                   "--repeat", str(args.repeat), *[a for p in PROMPTS for a in ("--prompt", p)]]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            row = bench(cmd)
            row["pair"] = label
            results.append(row)
            if args.out:
                args.out.write_text("\n".join(json.dumps(r) for r in results) + "\n")
    print("| pair | T | off tok/s | auto tok/s | speed-up (rounds) | worst prompt | acceptance | tokens/pass | held |")
    print("|---|---|---|---|---|---|---|---|---|")
    misses = []
    for r in results:
        by_prompt = r.get("by_prompt") or []
        worst = min(range(len(by_prompt)), key=by_prompt.__getitem__) if by_prompt else None
        worst_text = f"{by_prompt[worst]:.2f}x ({KINDS[worst]})" if worst is not None else "-"
        print(f"| {r['pair']} | {r['temperature']:g} | {r['baseline_tps']} | {r['speculative_tps']} | "
              f"**{r['speedup']:.2f}x** ({r['speedup_min']:.2f}-{r['speedup_max']:.2f}) | {worst_text} | "
              f"{r['acceptance_rate']:.0%} | {r['mean_accepted']} | {r['held_back']:.0%} |")
        spreads = r.get("by_prompt_spread") or [None] * len(by_prompt)
        misses += [f"{r['pair']} T {r['temperature']:g} {KINDS[i]}: {x:.2f}x{rounds(spreads[i])}"
                   for i, x in enumerate(by_prompt) if x < GOAL]
        if r["speedup"] < GOAL:
            misses.append(f"{r['pair']} T {r['temperature']:g} all prompts: {r['speedup']:.2f}x")
    print(f"\nunder {GOAL}x: " + ("; ".join(misses) if misses else "none"))
    print("held reasons:", *{r["held_reason"] for r in results if r.get("held_reason")}, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
