"""What a model's batched read of n new tokens costs, against one token: a held draft's catch-up.

A draft model held at K = 0 must first read the tokens it missed before its probe drafts
(`drafters/model.py`, `CATCH_UP_WINDOW`). On the CPU a small model's batched read is not much
cheaper per token than its one-token passes, so this prices the window: for each n, the median
over `--repeats` of reading n tokens after a 100-token prefix.

    python scripts/catch_up_cost.py DRAFT.gguf [TARGET.gguf ...] --threads 2

Wall-clock figures: run it on an otherwise idle machine (docs/BENCHMARKS.md, "Never slower").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from spectui import argtypes
from spectui.engine.model.llama_model import LlamaModel
from spectui.errors import SpectuiError

TEXT = "Once upon a time, in a small village by the sea, there lived an old fisherman who " * 40
PREFIX = 100
MAX_READ = 512
"""The longest read it prices (the text gives PREFIX + MAX_READ tokens and more)."""
read_size = argtypes.int_range(1, MAX_READ)


def sizes_list(value: str) -> list[int]:
    """`--sizes`: comma-separated reads of 1..MAX_READ tokens."""
    return [read_size(part) for part in value.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--sizes", type=sizes_list, default=sizes_list("1,2,8,16,24,32,64"))
    parser.add_argument("--repeats", type=argtypes.repeat, default=7)
    parser.add_argument("--threads", type=argtypes.threads, default=2)
    args = parser.parse_args()
    sizes: list[int] = args.sizes
    for path in args.models:
        try:
            model = LlamaModel.load(path, n_ctx=PREFIX + max(sizes) + 8, n_threads=args.threads)
        except SpectuiError as error:
            raise SystemExit(f"{Path(sys.argv[0]).name}: {error}") from None
        tokens = model.tokenize(TEXT)[:PREFIX + max(sizes)]
        if len(tokens) < PREFIX + max(sizes):
            raise SystemExit(f"{Path(sys.argv[0]).name}: {Path(path).name} reads the text as {len(tokens)} tokens, "
                             f"fewer than {PREFIX + max(sizes)}")
        row = []
        for n in sizes:
            seconds = []
            for _ in range(args.repeats):
                model.reset()
                model.catch_up(tokens[:PREFIX])
                start = time.perf_counter()
                model.catch_up(tokens[:PREFIX + n])
                seconds.append(time.perf_counter() - start)
            row.append(f"{n}: {statistics.median(seconds) * 1e3:.1f} ms")
        print(f"{Path(path).name}: " + ", ".join(row), flush=True)
        model.close()


if __name__ == "__main__":
    main()
