"""What an MTP head costs per draft token, against one target step: for docs/BENCHMARKS.md.

    python scripts/bench_mtp.py [--model PATH.gguf] [--shape tiny|qwen35-9b-like] [--layers N]
                                [--vocab N] [--context 512] [--k 3] [--rounds 30]
                                [--n-gpu-layers N] [--threads N] [--json]

One process loads the target with its MTP layer and the MTP drafter (spectui's own classes), reads
a prompt of `--context` random tokens, then measures, interleaved round after round (medians):

  target step   one llama_decode of one token on the target (the unit of plain decoding);
  verify        one target decode of K+1 rows (the verify pass of a K-token draft);
  head pass     one MTP head pass over (token, hidden row) with logits: the cost of each draft
                token after the first (the first one too, plus the catch-up below);
  catch-up      one head pass over K+1 rows without logits: how the head reads the rows the
                target kept after a verify (once per cycle, batched);
  draft(K)      catch-up + K head passes, as `MtpDrafter.propose` spends them; per draft token
                and as a fraction of a target step.

Without --model a qwen35 target with one MTP layer is generated with random weights:
`tiny` is the test suite's model (tests/tiny_mtp.py); `qwen35-9b-like` has Qwen3.5-9B-like
widths (scripts/bench_snapshots.py SHAPES) with `--layers` trunk layers (default 8 of 32: the head
is one layer plus the output matrix, so fewer trunk layers overstate the head's share) and a
`--vocab` of 248320 (the head's logits over the whole vocabulary are most of its cost). F16; it
needs about 20 GB of RAM to generate and is meant for a GPU machine (--n-gpu-layers 99). With
random weights the guesses mean nothing: acceptance needs real weights (`spectui bench --target
Qwen3.6-27B-MTP-....gguf --drafter mtp -k 1,2,3,auto`). Timings are wall-clock: run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def generate(shape: str, n_layer: int, vocab: int | None, directory: Path) -> Path:
    import tiny_hybrid
    import tiny_mtp
    from bench_snapshots import SHAPES

    if shape == "tiny":
        return tiny_mtp.write_mtp_target(directory)
    spec = tiny_hybrid.HybridSpec(n_layer=n_layer, **SHAPES[shape])
    n_vocab = vocab or 248320
    spec = replace(spec, tokens=spec.tokens + tuple(f"<x{i}>" for i in range(n_vocab - len(spec.tokens))))
    return tiny_mtp.write_shaped_mtp_target(directory / f"{shape}-{n_layer}-mtp.gguf", spec, f16=True)


def ms(samples: list[float]) -> float:
    return 1e3 * statistics.median(samples)


def measure(gen, context: int, k: int, rounds: int) -> dict[str, float]:
    import numpy as np

    target, drafter = gen.target, gen.drafters["mtp"]
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(5, min(target.n_vocab, 260), context + 1)]
    target.sync(tokens[:-1])
    drafter.prefill(tokens[:-1])
    n = len(tokens) - 1
    row = drafter.rows.get(n - 1)
    times: dict[str, list[float]] = {"target_step": [], "verify": [], "head_pass": [], "catch_up": []}
    for _ in range(rounds):
        target.truncate(n)  # (by checkpoint: a whole decode is undone; not timed)
        drafter.queue.clear()  # the drafter's decode listener copies rows (timed) but reads none now
        start = time.perf_counter()
        target.extend(tokens[-1:])
        times["target_step"].append(time.perf_counter() - start)
        target.truncate(n)
        drafter.queue.clear()
        start = time.perf_counter()
        target.extend(tokens[-1:] + tokens[:k], n_logits=k + 1)
        times["verify"].append(time.perf_counter() - start)
        drafter.head.drop_from(n)
        start = time.perf_counter()
        drafter.head.run([(n + i, tokens[i], row) for i in range(k + 1)], output_last=False)
        times["catch_up"].append(time.perf_counter() - start)
        drafter.head.drop_from(n)
        start = time.perf_counter()
        drafter.head.run([(n, tokens[-1], row)], output_last=True)
        drafter.head.head_output()
        times["head_pass"].append(time.perf_counter() - start)
    result = {f"{name}_ms": ms(values) for name, values in times.items()}
    draft = result["catch_up_ms"] + k * result["head_pass_ms"]
    result |= {"draft_ms": draft, "draft_per_token_ms": draft / k,
               "head_pass_vs_target_step": result["head_pass_ms"] / result["target_step_ms"],
               "draft_per_token_vs_target_step": draft / k / result["target_step_ms"]}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a GGUF with one MTP layer (e.g. a Qwen3.6 -MTP-GGUF)")
    parser.add_argument("--shape", choices=("tiny", "qwen35-9b-like"), default="tiny")
    parser.add_argument("--layers", type=int, default=8, help="trunk layers of a generated qwen35-9b-like model")
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary of a generated qwen35-9b-like model")
    parser.add_argument("--context", type=int, default=512, help="tokens read before measuring")
    parser.add_argument("--k", type=int, default=3, help="draft length of the verify and draft figures")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--n-gpu-layers", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()

    from spectui.engine.drafters import DrafterSpec
    from spectui.engine.generator import load_generator

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or generate(args.shape, args.layers, args.vocab, Path(tmp))
        gen = load_generator(path, DrafterSpec("mtp"), n_ctx=args.context + 4 * args.k + 64,
                             n_gpu_layers=args.n_gpu_layers, n_threads=args.threads)
        try:
            if "mtp" not in gen.drafters:
                print(f"{path.name}: {gen.speculation_off}", file=sys.stderr)
                return 1
            result = {"model": path.name, "arch": gen.target.arch, "n_layer": gen.target.n_layer,
                      "n_vocab": gen.target.n_vocab, "n_gpu_layers": gen.target.n_gpu_layers,
                      "machine": platform.machine(), "context": args.context, "k": args.k,
                      "rounds": args.rounds} | measure(gen, args.context, args.k, args.rounds)
        finally:
            gen.close()
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
