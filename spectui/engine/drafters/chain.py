"""Drafters combined in order: the first that proposes something wins the cycle.

`model+ngram` is a chain [ngram, model]: a lookup that finds a confident match proposes it for
free; otherwise the draft model proposes. Each member keeps its own `source`, so K = auto prices
and the panel counts each one separately. A member that has another behind it sees its budget
through `AheadOf`, which names that fallback: a lookup then proposes only what beats it
(`lookup_gate.min_score`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spectui.engine.config import SamplingConfig
from spectui.engine.drafters.base import Budget, Drafter, Feedback, Proposal


@dataclass(frozen=True)
class AheadOf:
    """The chain's budget as a member that is not last sees it: the same K and early stop, plus
    which drafter proposes if this one does not."""

    inner: Budget
    fallback: str
    """The `source` of the next member."""

    def k(self, source: str) -> int:
        return self.inner.k(source)

    def p_min(self, source: str) -> float:
        return self.inner.p_min(source)


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
        for i, member in enumerate(self.members):
            behind = self.members[i + 1].source if i + 1 < len(self.members) else ""
            proposal = member.propose(context, AheadOf(budget, behind) if behind else budget, cfg, rng)
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
