"""spectui against llama.cpp's C++ on a pair of real cost: the widened SmolLM2 (`demo-wide`).

    .venv/bin/python scripts/bench_wide.py                     # demo-wide (built first if needed), 3 rounds
    .venv/bin/python scripts/bench_wide.py --rounds 2 --temperatures 0 --out wide.json
    .venv/bin/python scripts/bench_wide.py --target T.gguf --draft D.gguf --llama-bin PATH

Each round, at each temperature, runs in turn: `spectui bench --json` once with its own
speculation-off baseline and every K of --ks (K = auto, 4, 8 by default: the baseline and the K
runs interleave inside it), then llama.cpp's `llama-speculative-simple` (scripts/build_llama_cpp.sh)
with the same target and draft at each --llama-n (`--spec-type draft-simple --spec-draft-n-max N`),
on the same prompts: `spectui bench`'s three default prompts, each rendered with the target's
chat template by spectui (the text spectui tokenizes, given to llama.cpp as a file). Both sample
with top-k 40, top-p 0.95, min-p 0.05 at T > 0 and use --threads threads. The rounds alternate
the sides, so a machine that is busier in one minute than the next disturbs both alike.

tokens/sec: spectui's is its bench's (generated tokens over the generation time, the prompt
excluded); llama.cpp's is its own "decoded N tokens in S seconds" (also after the prompt),
summed over the prompts. Reported per temperature, each the median over rounds: speculation off,
each K (and its speed-up over the baseline of its own round), llama.cpp's best n-max in each
round, and spectui's best K / llama.cpp's best. Also acceptance, tokens per target pass and host
milliseconds per cycle (spectui), and acceptance (llama.cpp). Nothing here is a test: it measures.
Run it on a quiet machine, or say that it was not; compare figures only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_lookup import ACCEPTED, DECODED, default_llama_bin, rendered_prompts  # noqa: E402

from spectui.bench import DEFAULT_PROMPTS  # noqa: E402


def spectui_rows(args: argparse.Namespace, temperature: float, seed: int) -> list[dict[str, Any]]:
    """`spectui bench --json` in its own process: the baseline and one row per K."""
    command = [sys.executable, "-m", "spectui", "bench", "--target", str(args.target), "--draft", str(args.draft),
               "--drafter", args.drafter, "-k", args.ks, "--temperature", str(temperature), "--seed", str(seed),
               "--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--json"]
    print(f"  spectui bench -k {args.ks} --temperature {temperature} --seed {seed} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace", cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"spectui bench failed (T={temperature}):\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def llama_run(args: argparse.Namespace, prompt: Path, n_max: int, temperature: float,
              seed: int) -> tuple[int, float, int, int]:
    """One `llama-speculative-simple` run: (decoded tokens, seconds, drafted, accepted)."""
    command = [str(args.llama_bin), "-m", str(args.target), "-md", str(args.draft), "-f", str(prompt),
               "-n", str(args.max_tokens), "-c", "4096", "-t", str(args.threads), "--seed", str(seed),
               "--temp", str(temperature), "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
               "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_max)]
    done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace")
    output = done.stdout + done.stderr
    decoded = DECODED.search(output)
    if done.returncode != 0 or decoded is None:
        raise SystemExit(f"llama-speculative-simple failed (n-max {n_max}):\n{output[-2000:]}")
    counts = ACCEPTED.search(output)
    drafted, accepted = (int(counts.group(1)), int(counts.group(2))) if counts else (0, 0)
    return int(decoded.group(1)), float(decoded.group(2)), drafted, accepted


def llama_round(args: argparse.Namespace, prompts: list[Path], temperature: float, seed: int) -> dict[str, Any]:
    """Every --llama-n over every prompt: n-max -> tok/s and acceptance over the prompts."""
    out: dict[str, Any] = {}
    for n_max in args.llama_n:
        print(f"  llama-speculative-simple --spec-draft-n-max {n_max} --temp {temperature} ...", file=sys.stderr,
              flush=True)
        runs = [llama_run(args, p, n_max, temperature, seed) for p in prompts]
        tokens, seconds = sum(r[0] for r in runs), sum(r[1] for r in runs)
        drafted, accepted = sum(r[2] for r in runs), sum(r[3] for r in runs)
        out[str(n_max)] = {"tps": round(tokens / seconds, 2), "tokens": tokens,
                           "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0}
    return out


def summary(rounds: list[dict[str, Any]], temperature: float) -> dict[str, Any]:
    """Medians over the rounds at one temperature."""
    mine = [r for r in rounds if r["temperature"] == temperature]
    ks = [str(row["k"]) for row in mine[0]["spectui"]]
    by_k = {k: [next(row for row in r["spectui"] if str(row["k"]) == k) for r in mine] for k in ks}
    best_llama = [max(v["tps"] for v in r["llama"].values()) for r in mine] if mine[0]["llama"] else []
    best_spectui = [max(row["speculative_tps"] for row in r["spectui"]) for r in mine]
    out: dict[str, Any] = {
        "temperature": temperature, "rounds": len(mine),
        "off_tps": median(r["spectui"][0]["baseline_tps"] for r in mine),
        "spectui": {k: {"tps": median(row["speculative_tps"] for row in rows),
                        "speedup": median(row["speedup"] for row in rows),
                        "acceptance_rate": median(row["acceptance_rate"] for row in rows),
                        "tokens_per_pass": median(row["mean_accepted"] for row in rows),
                        "identical": all(row["identical"] for row in rows) if temperature == 0 else None,
                        "host_ms_per_cycle": rows[-1]["host_ms_per_cycle"]} for k, rows in by_k.items()},
    }
    if best_llama:
        out["llama"] = {n: {"tps": median(r["llama"][n]["tps"] for r in mine),
                            "acceptance_rate": median(r["llama"][n]["acceptance_rate"] for r in mine)}
                        for n in mine[0]["llama"]}
        out["llama_best_tps"] = median(best_llama)
        out["auto_vs_llama_best"] = round(median(
            next(row["speculative_tps"] for row in r["spectui"] if row["k"] == "auto") / b
            for r, b in zip(mine, best_llama, strict=True)), 3) if "auto" in ks else None
        out["best_k_vs_llama_best"] = round(median(
            s / b for s, b in zip(best_spectui, best_llama, strict=True)), 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, help="a target GGUF (default: the demo-wide pair's)")
    parser.add_argument("--draft", type=Path, help="its draft GGUF (with --target)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperatures", default="0,0.8", help="comma-separated (default 0,0.8)")
    parser.add_argument("--ks", default="auto,4,8", help="spectui's draft lengths (default auto,4,8)")
    parser.add_argument("--drafter", default="model", help="spectui's drafter (default model: the draft alone)")
    parser.add_argument("--llama-n", default="4,8,16", help="llama.cpp's --spec-draft-n-max values (default 4,8,16)")
    parser.add_argument("--llama-bin", type=Path, default=None,
                        help="llama-speculative-simple (default: scripts/build_llama_cpp.sh's)")
    parser.add_argument("--no-llama", action="store_true", help="spectui only")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--out", type=Path, help="write the rounds and the summary here (JSON)")
    args = parser.parse_args()
    if args.target is None:
        from spectui.catalog import demo

        pair = demo.ensure_demo_pair(demo.WIDE.name)
        args.target, args.draft = pair.target, pair.draft
    elif args.draft is None:
        parser.error("--target needs --draft")
    args.llama_n = [] if args.no_llama else [int(n) for n in args.llama_n.split(",")]
    args.llama_bin = args.llama_bin or default_llama_bin()
    if args.llama_n and args.llama_bin is None:
        parser.error("no llama-speculative-simple: run scripts/build_llama_cpp.sh, or pass --llama-bin / --no-llama")
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rounds: list[dict[str, Any]] = []
    results: dict[str, Any] = {"summary": []}
    with tempfile.TemporaryDirectory() as tmp:
        prompts = []
        for i, text in enumerate(rendered_prompts(args.target, list(DEFAULT_PROMPTS))):
            (path := Path(tmp) / f"prompt{i}.txt").write_text(text)
            prompts.append(path)
        for round_no in range(1, args.rounds + 1):
            for temperature in temperatures:
                print(f"round {round_no}/{args.rounds}, T {temperature}", file=sys.stderr, flush=True)
                entry: dict[str, Any] = {"round": round_no, "temperature": temperature}
                sides = ["spectui", "llama"] if round_no % 2 else ["llama", "spectui"]
                for side in sides:
                    if side == "spectui":
                        entry["spectui"] = spectui_rows(args, temperature, seed=round_no)
                    else:
                        entry["llama"] = llama_round(args, prompts, temperature, seed=round_no) if args.llama_n else {}
                rounds.append(entry)
                results = write_results(args, rounds, temperatures)  # after every round: a cut run keeps them
    for item in results["summary"]:
        print(json.dumps(item))
    return 0


def write_results(args: argparse.Namespace, rounds: list[dict[str, Any]], temperatures: list[float]) -> dict[str, Any]:
    done = [t for t in temperatures if any(r["temperature"] == t for r in rounds)]
    results = {"target": str(args.target), "draft": str(args.draft), "max_tokens": args.max_tokens,
               "threads": args.threads, "rounds": rounds, "summary": [summary(rounds, t) for t in done]}
    if args.out:
        tmp = args.out.with_name(args.out.name + ".partial")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.replace(args.out)
    return results


if __name__ == "__main__":
    sys.exit(main())
