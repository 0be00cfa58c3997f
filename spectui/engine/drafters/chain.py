"""Drafters combined in order: the first that proposes something wins the cycle.

`model+ngram` is a chain [ngram, model]: a lookup that finds a confident match proposes it for
free; otherwise the draft model proposes. Each member keeps its own `source`, so K = auto prices
and the panel counts each one separately. A member that has another behind it sees its budget
through `AheadOf`, which names that fallback: a lookup then proposes only what beats it
(`lookup_gate.min_score`).

A member behind a lookup sees its budget through `Behind`: after each token it drafts it asks
`hands_over(context, drafted)`, and stops when the lookup would propose from there. Text that
repeats with a few words changed ("Week 3 / Wednesday: 100m, 100m, ...") then goes: the draft
model drafts the changed words, the lookup proposes the repeated rest in the next cycle for
free, instead of the draft model paying a forward pass for every repeated token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.step.drafter import Budget, BudgetView, Drafter, Feedback, Proposal


@dataclass(frozen=True)
class AheadOf(BudgetView):
    """The view of a member that is not last: the chain's budget, plus which drafter proposes
    if this one does not."""

    next_source: str
    """The `source` of the next member."""

    @property
    def fallback(self) -> str:
        return self.next_source


@runtime_checkable
class Lookup(Protocol):
    """What `Behind` needs of a lookup ahead (`LookupDrafter.would_propose`)."""

    def would_propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig) -> bool: ...


@dataclass(frozen=True)
class Behind(BudgetView):
    """The view of a member behind lookups: plus a question to ask after each drafted token:
    would a lookup ahead take over from here?"""

    ahead: Sequence[Lookup]
    me: str
    """This member's `source` (the lookups' fallback)."""
    cfg: SamplingConfig

    def hands_over(self, context: Sequence[int], drafted: Sequence[int]) -> bool:
        """True when a lookup ahead would propose after `context` and what this member drafted
        so far: stop drafting, the lookup goes on next cycle."""
        ahead = AheadOf(self.inner, self.me)
        grown = [*context, *drafted]
        return any(lookup.would_propose(grown, ahead, self.cfg) for lookup in self.ahead)


def members_of(drafter: Drafter) -> list[Drafter]:
    """A chain's members in order, else `drafter` alone."""
    return list(drafter.members) if isinstance(drafter, ChainDrafter) else [drafter]


class ChainDrafter:
    def __init__(self, members: Sequence[Drafter]) -> None:
        if not members:
            raise ValueError("a chain needs at least one drafter")
        self.members = list(members)
        self.source = "+".join(m.source for m in self.members)
        self.label = " + ".join(m.label for m in self.members)
        self.max_k = max(m.max_k for m in self.members)
        self._last: Drafter | None = None
        self._lookups_before = [[m for m in self.members[:i] if isinstance(m, Lookup)] for i in range(len(members))]
        """Per member, the lookups ahead of it (a runtime Protocol check each cycle cost ~20 us)."""

    def prefill(self, context: Sequence[int]) -> None:
        for member in self.members:
            member.prefill(context)

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal()
        work = 0
        for i, member in enumerate(self.members):
            proposal = member.propose(context, self._budget_of(i, budget, cfg), cfg, rng)
            work += proposal.work
            if proposal.tokens:
                self._last = member
                break
        else:
            self._last = None
        proposal.work = work
        return proposal

    def _budget_of(self, i: int, budget: Budget, cfg: SamplingConfig) -> Budget:
        """Member i's view: ahead of the next member, or behind the lookups before it."""
        if i + 1 < len(self.members):
            return AheadOf(budget, self.members[i + 1].source)
        lookups = self._lookups_before[i]
        return Behind(budget, lookups, self.members[i].source, cfg) if lookups else budget

    def feedback(self, result: Feedback) -> None:
        if self._last is not None:
            self._last.feedback(result)

    def reset(self) -> None:
        for member in self.members:
            member.reset()

    def close(self) -> None:
        """Members are owned by the generator, which closes each once."""
