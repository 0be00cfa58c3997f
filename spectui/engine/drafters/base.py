"""Who proposes the next tokens: the interface every drafter implements, and its `Proposal`.

The speculative step only needs proposed tokens and, when sampling, the distribution each was
drawn from. A draftless proposer (prompt lookup / n-gram, as vLLM and llama.cpp offer) plugs in
by returning tokens with `dists=None` entries treated as point masses (q(d) = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from spectui.engine.config import SamplingConfig
from spectui.engine.sampling import Dist


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    dists: list[Dist | None] = field(default_factory=list)
    """q_i, the distribution d_i was drawn from; None for a deterministic proposal."""
    confidences: list[float] = field(default_factory=list)
    """The proposer's confidence in each token (its top probability; 1.0 when not measured)."""
    decodes: int = 0
    """Forward passes the proposer ran (K = auto divides its drafting time by this)."""
    caught_up: int = 0
    """Context tokens the proposer had to read before drafting (2 at most in steady state)."""


class Proposer(Protocol):
    def prefill(self, context: Sequence[int]) -> None:
        """Read a new prompt (so its cost is counted as prompt processing, not decoding)."""

    def propose(self, context: Sequence[int], k: int, cfg: SamplingConfig,
                rng: np.random.Generator, p_min: float) -> Proposal:
        """Up to `k` tokens to follow `context`; may stop early when unsure (top prob < p_min)."""

    def reset(self) -> None:
        """Forget any cached context."""

    def close(self) -> None: ...
