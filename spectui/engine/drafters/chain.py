"""Drafters combined in order: the first that proposes something wins the cycle.

`model+ngram` is a chain [ngram, model]: a lookup that finds a confident match proposes it for
free; otherwise the draft model proposes. Each member keeps its own `source`, so K = auto prices
and the panel counts each one separately.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spectui.engine.config import SamplingConfig
from spectui.engine.drafters.base import Budget, Drafter, Feedback, Proposal


class ChainDrafter:
    def __init__(self, members: Sequence[Drafter]) -> None:
        if not members:
            raise ValueError("a chain needs at least one drafter")
        self.members = list(members)
        self.source = "+".join(m.source for m in self.members)
        self.label = " + ".join(m.label for m in self.members)
        self.max_k = max(m.max_k for m in self.members)
        self._last: Drafter | None = None

    def prefill(self, context: Sequence[int]) -> None:
        for member in self.members:
            member.prefill(context)

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal()
        work = 0
        for member in self.members:
            proposal = member.propose(context, budget, cfg, rng)
            work += proposal.work
            if proposal.tokens:
                self._last = member
                break
        else:
            self._last = None
        proposal.work = work
        return proposal

    def feedback(self, result: Feedback) -> None:
        if self._last is not None:
            self._last.feedback(result)

    def reset(self) -> None:
        for member in self.members:
            member.reset()

    def close(self) -> None:
        """Members are owned by the generator, which closes each once."""
