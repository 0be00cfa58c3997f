"""Who proposes the next tokens: the interface, and the draft-model proposer.

The speculative step only needs proposed tokens and, when sampling, the distribution each was
drawn from. A draftless proposer (prompt lookup / n-gram, as vLLM and llama.cpp offer) plugs in
by returning tokens with `dists=None` entries treated as point masses (q(d) = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from spectui.engine import sampling
from spectui.engine.config import SamplingConfig
from spectui.engine.model import LlamaModel
from spectui.engine.sampling import Dist

# How llama.cpp's draft measures its confidence when drafting greedily: softmax over its top 10.
GREEDY_CONFIDENCE = SamplingConfig(temperature=1.0, top_k=10, top_p=1.0, min_p=0.0)


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


class DraftModelProposer:
    """Proposes tokens from a small draft model's own distribution q."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model

    def prefill(self, context: Sequence[int]) -> None:
        self.model.sync(context)

    def propose(self, context: Sequence[int], k: int, cfg: SamplingConfig,
                rng: np.random.Generator, p_min: float) -> Proposal:
        proposal = Proposal()
        k = min(k, self.model.room() - 1)
        if k <= 0:
            return proposal
        # Catch up: decode whatever the draft has not seen (at least the last token).
        proposal.caught_up = len(context) - self.model.kept_on_sync(context)
        logits = self.model.sync(context)
        proposal.decodes = 1
        while True:
            token, dist, confidence = self._choose(logits, cfg, rng, p_min)
            if confidence < p_min:
                break  # unsure: a likely rejection costs more than it saves
            proposal.tokens.append(token)
            proposal.dists.append(dist)
            proposal.confidences.append(confidence)
            if len(proposal.tokens) == k or self.model.is_eog(token):
                break
            logits = self.model.extend([token])[0]
            proposal.decodes += 1
        return proposal

    @staticmethod
    def _choose(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator,
                p_min: float) -> tuple[int, Dist | None, float]:
        if cfg.greedy:
            confidence = 1.0
            if p_min > 0.0:
                confidence = sampling.distribution(logits, GREEDY_CONFIDENCE).top_prob()
            return sampling.greedy(logits), None, confidence
        q = sampling.distribution(logits, cfg)
        return sampling.sample(q, rng), q, q.top_prob()

    def reset(self) -> None:
        self.model.reset()

    def close(self) -> None:
        self.model.close()
