"""What recurrent-state snapshots cost a hybrid target, and what they save: for docs/BENCHMARKS.md.

    python scripts/bench_snapshots.py [--model PATH.gguf] [--shape tiny|wide|qwen35-9b-like]
                                      [--layers N] [--f16] [--rounds 20] [--ks 1,2,4,8,16]
                                      [--n-gpu-layers N] [--threads N] [--json]

The same model is loaded twice in one process, with `rollback_depth` 0 (no snapshots: llama.cpp's
n_rs_seq = 0) and 16 (spectui's default for a speculative target), and the two are measured
interleaved, round after round, so machine drift hits both alike. Medians are reported:

  verify   one llama_decode of K+1 rows (a verify pass [last, d_1..d_K], logits on every row):
           the snapshots' cost is the extra state copies this decode writes (min(K+1, n_rs_seq+1)
           states per recurrent layer);
  cycle    verify, then undo half the draft and decode the next token, the way each context
           must: with snapshots a rollback is bookkeeping (the next decode reads the snapshot);
           without, the state is checkpointed before the verify, restored after it, and the
           accepted tokens are decoded again (what llama.cpp's server does without n_rs_seq);
  one row  a plain single-token decode, the unit a verify pass is compared with.

Also printed: the recurrent-state bytes of each context (llama.cpp's log) next to spectui's
formula, state_bytes x (1 + n_rs_seq). Without --model a qwen35 model of the chosen shape is
generated with random weights (tests/tiny_hybrid.py; `qwen35-9b-like` is F16, about 3.5 GB for 8
layers, and needs about 11 GB of RAM to generate: meant for a GPU machine, with --n-gpu-layers
99). Timings are wall-clock: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

SHAPES = {
    "tiny": {},
    "wide": {"n_embd": 256, "n_ff": 512, "ssm_state_size": 64, "ssm_time_step_rank": 8, "ssm_group_count": 4},
    # Qwen3.5-9B-like dimensions (hidden 4096, GDN 16 key / 32 value heads of 128, attention
    # 16 heads / 4 KV heads of 256, every 4th layer attention); check against the real config.
    "qwen35-9b-like": {"n_embd": 4096, "n_ff": 12288, "n_head": 16, "n_head_kv": 4, "head_dim": 256,
                       "full_attention_interval": 4, "ssm_state_size": 128, "ssm_group_count": 16,
                       "ssm_time_step_rank": 32},
}


def generate(shape: str, n_layer: int, f16: bool, directory: Path) -> Path:
    import numpy as np
    import tiny_hybrid

    spec = tiny_hybrid.HybridSpec(n_layer=n_layer, **SHAPES[shape])
    weights = tiny_hybrid.hybrid_weights(spec, seed=1)
    if f16:  # matrices only: llama.cpp's ssm_conv wants its kernel in f32, as converted GGUFs have it
        weights = {name: w.astype(np.float16) if w.ndim == 2 and "ssm_conv1d" not in name else w
                   for name, w in weights.items()}
    return tiny_hybrid.write_hybrid_gguf(directory / f"{shape}-{n_layer}.gguf", spec, weights, shape)


def rs_mib() -> float | None:
    from spectui.engine.llama import llama_log

    lines = [m for _, m in llama_log._lines if "llama_memory_recurrent: size =" in m]
    return float(re.search(r"size =\s+([\d.]+) MiB", lines[-1])[1]) if lines else None


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def one_cycle(model, prompt: list[int], draft: list[int], snapshots: bool) -> tuple[float, float]:
    """(verify seconds, whole-cycle seconds) for one verify of [prompt[-1], *draft]."""
    n_cached = len(prompt) - 1
    model.truncate(n_cached)
    start = time.perf_counter()
    if not snapshots:
        model.checkpoint()  # the state before the verify pass, to come back to
    t0 = time.perf_counter()
    model.extend([prompt[-1], *draft], n_logits=len(draft) + 1)
    verify = time.perf_counter() - t0
    accepted = len(draft) // 2
    model.truncate(n_cached + 1 + accepted)
    model.extend([draft[0]])  # the next token (any token: the cost is the same)
    return verify, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a GGUF of a snapshot arch (qwen35, lfm2, nemotron_h, ...)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="wide")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--f16", action="store_true", help="generated matrices in f16 (always for qwen35-9b-like)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ks", default="1,2,4,8,16")
    parser.add_argument("--n-gpu-layers", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()

    from spectui.engine.model.llama_model import LlamaModel

    with tempfile.TemporaryDirectory() as tmp:
        f16 = args.f16 or args.shape == "qwen35-9b-like"
        path = args.model or generate(args.shape, args.layers, f16, Path(tmp))
        models, state_mib = {}, {}
        for depth in (0, 16):
            models[depth] = LlamaModel.load(path, n_ctx=1024, rollback_depth=depth, n_gpu_layers=args.n_gpu_layers,
                                            n_threads=args.threads)
            state_mib[depth] = rs_mib()
        if models[16].rollback != "snapshots":
            print(f"{path.name}: arch {models[16].arch} keeps no snapshots; nothing to compare", file=sys.stderr)
            return 1
        prompt = models[0].tokenize("The story of the wind and the rain, told by the lighthouse keeper")
        for model in models.values():
            model.sync(prompt)
        one_row = {d: [] for d in models}
        results = []
        ks = [int(k) for k in args.ks.split(",")]
        for k in ks:
            draft = (prompt * 4)[:k]
            samples = {d: ([], []) for d in models}
            for _ in range(args.rounds):
                for depth, model in models.items():
                    verify, cycle = one_cycle(model, prompt, draft, snapshots=depth > 0)
                    samples[depth][0].append(verify)
                    samples[depth][1].append(cycle)
                    model.truncate(len(prompt) - 1)
                    one_row[depth].append(timed(lambda m=model: m.extend(prompt[-1:])))
            for depth in models:
                results.append({
                    "k": k, "n_rs_seq": depth,
                    "verify_ms": 1e3 * statistics.median(samples[depth][0]),
                    "cycle_ms": 1e3 * statistics.median(samples[depth][1]),
                })
        header = {
            "model": path.name, "arch": models[16].arch, "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(), "rounds": args.rounds,
            "one_row_ms": {d: 1e3 * statistics.median(v) for d, v in one_row.items()},
            "recurrent_state_mib_logged": state_mib,
            "rewinds": {d: m.rewind_counts for d, m in models.items()},
        }
        for model in models.values():
            model.close()
    if args.json:
        print(json.dumps(header))
        for row in results:
            print(json.dumps(row))
        return 0
    print(json.dumps(header, indent=1))
    print(f"{'K':>3} {'verify n_rs_seq=0':>18} {'=16':>8} {'cycle n_rs_seq=0':>17} {'=16':>8}  (ms, medians)")
    by = {(r["k"], r["n_rs_seq"]): r for r in results}
    for k in ks:
        a, b = by[(k, 0)], by[(k, 16)]
        print(f"{k:>3} {a['verify_ms']:>18.2f} {b['verify_ms']:>8.2f} {a['cycle_ms']:>17.2f} {b['cycle_ms']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
