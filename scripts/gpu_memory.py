"""spectui's memory plan for a pair against what the device reports once the pair is loaded.

    python scripts/gpu_memory.py --target T.gguf --draft D.gguf [--ctx 4096] [--out FILE]

The plan (`session/memory.py`: weights from the file, KV cache per token from the header, times
its overhead factor) is what decides how many layers go to the GPU; this loads the target and the
draft model the way `spectui bench` does (all layers offloaded) and reads the device's free memory
from llama.cpp's registry before and after, and nvidia-smi's used memory where there is one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GIB = 1024**3


def nvidia_used_mib() -> int | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=20)
        return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def free_device_bytes() -> int:
    from spectui.engine.llama.build_info import read_build_info

    return sum(d.free_bytes for d in read_build_info().gpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from spectui.engine.generator import load_generator
    from spectui.session import memory

    target_fp, draft_fp = memory.read_footprint(args.target), memory.read_footprint(args.draft)
    planned = {"target_bytes": target_fp.total(args.ctx), "draft_bytes": draft_fp.total(args.ctx),
               "overhead_factor": memory.OVERHEAD}
    planned["with_overhead_bytes"] = int((planned["target_bytes"] + planned["draft_bytes"]) * memory.OVERHEAD)
    free_before, used_before = free_device_bytes(), nvidia_used_mib()
    gen = load_generator(args.target, args.draft, n_ctx=args.ctx)
    try:
        free_after, used_after = free_device_bytes(), nvidia_used_mib()
    finally:
        gen.close()
    found = {"ctx": args.ctx, "plan": planned, "device_free_before": free_before, "device_free_after": free_after,
             "device_taken_bytes": free_before - free_after,
             "nvidia_smi_used_mib_before": used_before, "nvidia_smi_used_mib_after": used_after}
    taken = found["device_taken_bytes"]
    print(f"memory: plan {planned['target_bytes'] / GIB:.2f} + {planned['draft_bytes'] / GIB:.2f} GiB "
          f"(x{memory.OVERHEAD} = {planned['with_overhead_bytes'] / GIB:.2f} GiB); the device lost "
          f"{taken / GIB:.2f} GiB of free memory loading both (nvidia-smi used {used_before} -> {used_after} MiB)")
    if args.out:
        args.out.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
