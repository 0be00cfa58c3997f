"""Running the MTP drafter in tests (`test_mtp`, `test_mtp_gemma4`): a reply at a given K, the
greedy acceptance over a few prompts, the head's first proposal, and a pair as the lossless
helpers read it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import lossless
import numpy as np

from spectui.engine.config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.drafters import DrafterSpec
from spectui.engine.drafters.base import FixedBudget
from spectui.engine.events import Finished
from spectui.engine.generator import Generator

THREADS = 1  # these tiny models decode in about a millisecond: threads only add synchronisation


PROMPTS = ["The story of the wind", "Once upon a time", "Hello there", "in the"]


class MtpPair(NamedTuple):
    """What the lossless helpers (tests/lossless.py) read from a pair: a target and what drafts for it."""

    target: Path
    draft: DrafterSpec


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


def first_proposal(gen: Generator, context: list[int]):
    """The drafter's next proposal at T = 1 from a fixed seed: its tokens and its q's."""
    return gen.drafters["mtp"].propose(context, FixedBudget(3), lossless.PURE, np.random.default_rng(7))
