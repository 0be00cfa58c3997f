"""Running the MTP drafter in tests (`test_mtp`, `test_mtp_gemma4`): the head's first proposal and a
pair as the lossless helpers read it (a reply at a given K and the greedy acceptance: head_runs)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import lossless
import numpy as np

from spectui.engine.drafters import DrafterSpec
from spectui.engine.generator import Generator
from spectui.engine.step.drafter import FixedBudget

THREADS = 1  # these tiny models decode in about a millisecond: threads only add synchronisation




class MtpPair(NamedTuple):
    """What the lossless helpers (tests/lossless.py) read from a pair: a target and what drafts for it."""

    target: Path
    draft: DrafterSpec


def first_proposal(gen: Generator, context: list[int]):
    """The drafter's next proposal at T = 1 from a fixed seed: its tokens and its q's."""
    return gen.drafters["mtp"].propose(context, FixedBudget(3), lossless.PURE, np.random.default_rng(7))
