"""Runs of a target with a feature-level head (tests/test_feature_heads.py, test_dflash_variants.py):
load a generated pair, generate, measure greedy acceptance, and point tests/lossless.py's check at
the hybrid target."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import NamedTuple

import lossless
import pytest
import tiny_bigram

from spectui.engine.drafters import DrafterSpec
from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator, load_generator
from spectui.engine.step.drafter import FixedBudget

THREADS = 1  # these tiny models decode in about a millisecond: threads only add synchronisation
PROMPTS = ["The story of the wind", "Once upon a time", "Hello there", "in the"]


LLAMA_BUILD = Path(os.environ.get("SPECTUI_LLAMA_BUILD", Path.home() / ".cache/spectui/llama.cpp-0.3.36"))
LLAMA_SPECULATIVE = LLAMA_BUILD / "build/bin/llama-speculative-simple"
"""llama.cpp's own driver as scripts/build_llama_cpp.sh builds it (SPECTUI_LLAMA_BUILD: another build)."""


class StopBelow(FixedBudget):
    """K fixed, and a draft stops once its confidence falls below `floor` (as K = auto's p_min does)."""

    def __init__(self, k: int, floor: float) -> None:
        super().__init__(k)
        self.floor = floor

    def p_min(self, source: str) -> float:
        return self.floor


class HeadPair(NamedTuple):
    """What the lossless helpers (tests/lossless.py) read from a pair: a target and what drafts for it."""

    target: Path
    draft: DrafterSpec


def tiny_targets(directory: Path) -> dict[str, tiny_bigram.BigramTarget]:
    """The two generated targets every head is tried on: an attention `llama` and a hybrid `qwen35`."""
    return {"llama": tiny_bigram.llama_target(directory), "qwen35": tiny_bigram.hybrid_target(directory)}


def write_heads(targets: dict[str, tiny_bigram.BigramTarget], writers) -> dict[tuple[str, str], Path]:
    """One head of each kind in `writers` (kind -> writer) per target, beside the target's file; a
    kind may be `kind-variant`, another head that drafts as that kind (`dspark-v4`)."""
    return {(kind, name): write(target.path.with_name(f"{kind}-{name}.gguf"), target)
            for kind, write in writers.items() for name, target in targets.items()}


def pair(targets, heads, kind: str, target: str) -> HeadPair:
    return HeadPair(targets[target].path, DrafterSpec(kind.partition("-")[0], heads[kind, target]))


def load(targets, heads, kind: str, target: str, n_ctx: int = 1024) -> Generator:
    chosen = pair(targets, heads, kind, target)
    return load_generator(chosen.target, chosen.draft, n_ctx=n_ctx, n_threads=THREADS)


def run(gen: Generator, prompt: str | list[int], k, max_tokens: int = 48, **sampling) -> Finished:
    tokens = gen.target.tokenize(prompt) if isinstance(prompt, str) else prompt
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig(**sampling))
    final = list(gen.generate(tokens, config, DraftControl(k)))[-1]
    assert isinstance(final, Finished)
    return final


def greedy_acceptance(gen: Generator, ks=(1, 2, 3)) -> tuple[float, int]:
    drafted = accepted = 0
    for prompt in PROMPTS:
        for k in ks:
            final = run(gen, prompt, k)
            drafted += final.stats.drafted
            accepted += final.stats.accepted
    return accepted / drafted, drafted


def use_the_hybrid_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lossless check on one thread, from a context where the tiny qwen35 target is unsure."""
    monkeypatch.setattr(lossless, "PROMPT", "then we")
    monkeypatch.setattr(lossless, "load_generator", functools.partial(load_generator, n_threads=THREADS))
