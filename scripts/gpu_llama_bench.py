"""llama.cpp's `llama-speculative-simple` on the prompts `spectui bench` uses, for gpu_check.sh.

    python scripts/gpu_llama_bench.py --target T.gguf --draft D.gguf --llama-bin PATH [--max-tokens 128]
                                      [--n-max 4,8,16] [--temperatures 0,0.8] [--out FILE]

Each of `spectui bench`'s default prompts, rendered exactly as spectui tokenizes it (the target's
chat format, one user turn: scripts/bench_lookup.py's `rendered_prompts`), goes to
`llama-speculative-simple --spec-type draft-simple` once per draft length and temperature; its
own figures (decoded tokens, seconds, drafted, accepted) are summed over the prompts. At T 0.8 it
samples with top-k 40, top-p 0.95, min-p 0.05, as `spectui bench --temperature 0.8` does. Layers
go where llama.cpp's default puts them (all on the GPU when they fit). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_lookup

from spectui.bench import DEFAULT_PROMPTS


def csv_of(kind):
    return lambda text: [kind(part) for part in text.split(",") if part.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--llama-bin", type=Path, required=True)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--n-max", type=csv_of(int), default=[4, 8, 16])
    parser.add_argument("--temperatures", type=csv_of(float), default=[0.0, 0.8])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-llama-") as scratch:
        files = []
        for i, text in enumerate(bench_lookup.rendered_prompts(args.target, list(DEFAULT_PROMPTS))):
            path = Path(scratch) / f"prompt{i}.txt"
            path.write_text(text)
            files.append(path)
        for temperature in args.temperatures:
            for n_max in args.n_max:
                setup = bench_lookup.Setup(target=args.target, draft=args.draft, llama_bin=args.llama_bin,
                                           repeat=1, max_tokens=args.max_tokens, threads=args.threads)
                bench_lookup.LLAMA_K = n_max  # llama_run reads the draft length from here
                decoded = seconds = drafted = accepted = 0.0
                for path in files:
                    d, s, dr, ac = bench_lookup.llama_run(setup, path, "draft-simple", temperature, args.max_tokens)
                    decoded, seconds, drafted, accepted = decoded + d, seconds + s, drafted + dr, accepted + ac
                row = {"temperature": temperature, "n_max": n_max, "decoded": int(decoded),
                       "seconds": round(seconds, 3), "tok_s": round(decoded / seconds, 2) if seconds else None,
                       "drafted": int(drafted), "accepted": int(accepted),
                       "acceptance": round(accepted / drafted, 3) if drafted else None}
                print(f"llama-speculative-simple T {temperature} n-max {n_max}: {row['tok_s']} tok/s, "
                      f"acceptance {row['acceptance']}", flush=True)
                rows.append(row)
    if args.out:
        args.out.write_text(json.dumps({"args": sys.argv[1:], "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
