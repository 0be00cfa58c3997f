"""`spectui bench`: speculative vs. plain decoding on the same models, loaded once.

For every prompt the speculation-off baseline (K = 0, the same engine with no draft work) and
the speculative loop each generate `--max-tokens` tokens; tokens/sec is total decoded tokens over
total decode time. `-k 1,2,4,8` sweeps draft lengths: one row (one JSON line) per K. Progress
goes to stderr so stdout stays clean for `--json`.

`--repeat N` runs the baseline and every K N times, interleaved (baseline, K1, K2, ..., then
again), and reports medians, with each speedup taken against the baseline of its own round: a
shared or throttled CPU drifts by tens of percent over minutes, and interleaving keeps that drift
out of the ratio.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median

from spectui.engine.config import AUTO, DraftControl, DraftLength, GenerationConfig, SamplingConfig
from spectui.engine.events import Finished, GenerationStats
from spectui.engine.generator import Generator, load_generator

DEFAULT_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash map works, step by step, for a new programmer.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
)
DEFAULT_MAX_TOKENS = 128


@dataclass(frozen=True)
class RunTotals:
    """Decode totals over all prompts for one K."""

    tokens: int
    seconds: float
    drafted: int
    accepted: int
    passes: int
    outputs: tuple[tuple[int, ...], ...]
    prompt_tokens: int
    prompt_seconds: float

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class BenchRow:
    """One K's result; the keys of `--json`."""

    k: int | str
    temperature: float
    max_tokens: int
    prompts: int
    baseline_tps: float
    speculative_tps: float
    speedup: float
    acceptance_rate: float
    mean_accepted: float
    identical: bool | None
    """Outputs equal token for token (only meaningful at temperature 0; null otherwise)."""
    prompt_tps: float
    repeats: int
    peak_rss_mb: float
    target: str
    draft: str


def prompt_tokens(gen: Generator, prompts: Sequence[str]) -> list[list[int]]:
    """Each prompt as one user turn in the model's chat template (a plain format without one)."""
    from spectui.chat.template import ChatFormat, ChatMessage, encode_prompt

    fmt = ChatFormat.from_model(gen.target)
    return [encode_prompt(gen.target, fmt.render([ChatMessage("user", p)])) for p in prompts]


def run_all(gen: Generator, prompts: list[list[int]], k: DraftLength, config: GenerationConfig) -> RunTotals:
    stats: list[GenerationStats] = []
    outputs: list[tuple[int, ...]] = []
    for i, prompt in enumerate(prompts):
        gen.reset()  # every run reads its prompt from scratch: same work for each K
        final = next(e for e in gen.generate(prompt, config, DraftControl(k)) if isinstance(e, Finished))
        if final.reason == "context":
            print(f"  prompt {i + 1}: {final.message}", file=sys.stderr)
        stats.append(final.stats)
        outputs.append(final.tokens)
    return RunTotals(
        tokens=sum(s.decode_tokens for s in stats),
        seconds=sum(s.decode_seconds for s in stats),
        drafted=sum(s.drafted for s in stats),
        accepted=sum(s.accepted for s in stats),
        passes=sum(s.target_passes for s in stats),
        outputs=tuple(outputs),
        prompt_tokens=sum(s.prompt_tokens for s in stats),
        prompt_seconds=sum(s.prompt_seconds for s in stats),
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB.

    Linux's VmHWM belongs to this process image; getrusage's ru_maxrss would also count a parent's
    peak from before exec (a benchmark script that spawned us), so it is only the fallback.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def make_row(k: DraftLength, config: GenerationConfig, bases: list[RunTotals], specs: list[RunTotals],
             target: Path, draft: Path) -> BenchRow:
    """One K's row: medians over the rounds; each round's speedup against its own baseline."""
    greedy = config.sampling.greedy
    ratios = [s.tps / b.tps for s, b in zip(specs, bases, strict=True) if b.tps]
    drafted, accepted = sum(s.drafted for s in specs), sum(s.accepted for s in specs)
    tokens, passes = sum(s.tokens for s in specs), sum(s.passes for s in specs)
    prompt_tokens, prompt_seconds = sum(s.prompt_tokens for s in specs), sum(s.prompt_seconds for s in specs)
    return BenchRow(
        k=k,
        temperature=config.sampling.temperature,
        max_tokens=config.max_tokens,
        prompts=len(bases[0].outputs),
        baseline_tps=round(median(b.tps for b in bases), 2),
        speculative_tps=round(median(s.tps for s in specs), 2),
        speedup=round(median(ratios), 3) if ratios else 0.0,  # no ratio: a reply ended at once
        acceptance_rate=round(accepted / drafted, 4) if drafted else 0.0,
        mean_accepted=round(tokens / passes, 3) if passes else 0.0,
        identical=all(s.outputs == b.outputs for s, b in zip(specs, bases, strict=True)) if greedy else None,
        prompt_tps=round(prompt_tokens / prompt_seconds, 1) if prompt_seconds else 0.0,
        repeats=len(specs),
        peak_rss_mb=round(peak_rss_mb(), 1),
        target=str(target),
        draft=str(draft),
    )


def print_table(rows: list[BenchRow]) -> None:
    print(f"{'K':>5} {'baseline tok/s':>15} {'spec tok/s':>11} {'speedup':>8} {'accept':>7} "
          f"{'mean acc.':>9} {'identical':>9}")
    for r in rows:
        identical = "-" if r.identical is None else ("yes" if r.identical else "NO")
        print(f"{r.k!s:>5} {r.baseline_tps:>15.1f} {r.speculative_tps:>11.1f} {r.speedup:>7.2f}x "
              f"{r.acceptance_rate:>7.1%} {r.mean_accepted:>9.2f} {identical:>9}")


def resolve_models(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.target or args.draft:
        if not (args.target and args.draft):
            from spectui.errors import SpectuiError

            raise SpectuiError("give both --target and --draft (or neither, to use a pair)")
        return Path(args.target), Path(args.draft)
    from spectui.catalog import resolve_pair

    pair = resolve_pair(args.pair)
    return pair.target, pair.draft


def bench_command(args: argparse.Namespace) -> int:
    target, draft = resolve_models(args)
    ks: list[DraftLength] = args.draft_length or [AUTO]
    config = GenerationConfig(
        max_tokens=args.max_tokens or DEFAULT_MAX_TOKENS,
        sampling=SamplingConfig(temperature=args.temperature, seed=0 if args.seed is None else args.seed),
    )
    print(f"loading {target.name} + {draft.name} ...", file=sys.stderr)
    gen = load_generator(target, draft, n_ctx=args.ctx, n_gpu_layers=args.n_gpu_layers,
                         draft_n_gpu_layers=args.draft_n_gpu_layers, n_threads=args.threads)
    try:
        prompts = prompt_tokens(gen, args.prompt or DEFAULT_PROMPTS)
        run_all(gen, prompts[:1], 0, GenerationConfig(max_tokens=8))  # warm-up: first-touch page faults
        bases: list[RunTotals] = []
        specs: dict[DraftLength, list[RunTotals]] = {k: [] for k in ks}
        for round_no in range(1, args.repeat + 1):
            of = f" (round {round_no}/{args.repeat})" if args.repeat > 1 else ""
            print(f"baseline (K=0) on {len(prompts)} prompt(s){of} ...", file=sys.stderr)
            bases.append(run_all(gen, prompts, 0, config))
            for k in ks:
                print(f"speculative K={k}{of} ...", file=sys.stderr)
                specs[k].append(run_all(gen, prompts, k, config))
        rows = [make_row(k, config, bases, specs[k], target, draft) for k in ks]
        if args.json:
            for row in rows:
                print(json.dumps(asdict(row)), flush=True)
        else:
            print_table(rows)
    finally:
        gen.close()
    return 0
