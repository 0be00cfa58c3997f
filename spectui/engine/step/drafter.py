"""What every drafter implements, what it hands the step, and what the step hands back.

A drafter proposes up to k tokens to follow the context; the speculative step verifies them in one
target pass and then tells the drafter how it went (`Feedback`). When sampling, each proposed token
comes with the distribution q it was drawn from; a deterministic proposal (a lookup, a greedy
draft) leaves q as None and the step treats it as a point mass, q(d) = 1.

A proposal is a chain (each token follows the one before) unless it names each token's parent: a
token tree, several candidates for one position, all verified in the same target pass
(`spectui.engine.step.tree`). Trees are optional: a drafter that never sets a parent proposes chains
and needs nothing else.

How many tokens each drafter may propose this cycle, and when it should stop early, is asked of a
`Budget`: a fixed K answers the same for every drafter; K = auto answers per drafter from what it
measured (`spectui.engine.planning.autodraft`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.step.draftplan import DraftPlan
from spectui.engine.step.sampling import Dist


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    dists: list[Dist | None] = field(default_factory=list)
    """q_i, the distribution d_i was drawn from; None for a deterministic proposal."""
    confidences: list[float] = field(default_factory=list)
    """The drafter's confidence in each token (its probability estimate; 1.0 when not measured)."""
    source: str = ""
    """Which drafter proposed these tokens (`model`, `ngram`, …); empty when nothing was proposed."""
    work: int = 0
    """Units of work the drafter did: forward passes for a model, 0 for a free lookup. K = auto
    learns each drafter's cost per call and per unit from this and the time the call took."""
    caught_up: int = 0
    """Context tokens the drafter had to read before drafting (2 at most in steady state)."""
    calibrated: bool = False
    """`confidences` are the drafter's own probabilities of its tokens, which K = auto calibrates
    into chances of acceptance for the next cycle's plan (`draftplan.py`)."""
    parents: list[int] = field(default_factory=list)
    """A token tree: parents[i] is the index in `tokens` of token i's parent, -1 when it follows
    the context. Empty for a chain. Parents come before their children, and the children of one
    parent in the order they were drawn: child j's dist is the q it was drawn from *given* the
    siblings before it (for a draw without replacement, q with them removed and renormalized)."""

    def add(self, token: int, dist: Dist | None = None, confidence: float = 1.0, parent: int | None = None) -> None:
        """Append a token; `parent` (an index in `tokens`, -1 for the context) makes this a tree,
        None extends the chain (the token follows the one added before it)."""
        if parent is not None or self.parents:
            if len(self.parents) < len(self.tokens):
                self.parents = list(range(-1, len(self.tokens) - 1))  # the chain so far
            self.parents.append(len(self.tokens) - 1 if parent is None else parent)
        self.tokens.append(token)
        self.dists.append(dist)
        self.confidences.append(confidence)

    def parent(self, i: int) -> int:
        return self.parents[i] if self.parents else i - 1

    @property
    def is_tree(self) -> bool:
        """True when some position has more than one candidate."""
        return any(parent != i - 1 for i, parent in enumerate(self.parents))

    def leaves(self) -> int:
        """Branches of the proposal: 1 for a chain, a tree's leaves."""
        if not self.parents:
            return 1
        return len(self.tokens) - len(set(self.parents) - {-1})

    def main_chain(self) -> int:
        """How many tokens from the start form a chain (each the first child of the one before):
        the whole proposal for a chain; for a tree, the path its drafter rated likeliest."""
        n = 0
        while n < len(self.tokens) and self.parent(n) == n - 1:
            n += 1
        return n

    def pruned_to_chain(self) -> Proposal:
        """The main chain alone (a valid chain proposal: each of its tokens was its parent's first
        draw), for a target that cannot verify a tree."""
        n = self.main_chain()
        return Proposal(self.tokens[:n], self.dists[:n], self.confidences[:n], self.source, self.work,
                        self.caught_up, self.calibrated)


@dataclass(frozen=True)
class Feedback:
    """What the verify pass decided, handed to the drafter that proposed."""

    context: Sequence[int]
    """The context the proposal followed (it ends with the token the target had not decoded)."""
    proposal: Proposal
    accepted: int
    """How many of the proposed tokens the target accepted (a prefix; for a tree, a path)."""
    emitted: Sequence[int]
    """The accepted tokens, then the target's own token: the context grows by exactly these."""
    verify_rows: int
    """Rows of the target's verify pass: [last, d_1..d_n] -> n + 1. Row i scored d_{i+1}; the target
    keeps rows 0..accepted and a drafter that reads the target (MTP) may read them now, before the
    next target decode overwrites them. (For a tree, row i + 1 scored the children of token i.)"""
    path: Sequence[int] = ()
    """For a tree: the indices in `proposal.tokens` of the accepted tokens, root first."""


class Budget(Protocol):
    """How much each drafter may propose this cycle: every question a drafter may ask of it.

    Every budget answers `k`, `p_min` and `limit`. The rest only some budgets have an answer to
    (K = auto's plan and measurements, a chain's view of its members); `BudgetDefaults` gives
    the answer of a budget that has none, and a wrapper (`BudgetView`) passes each question on
    to the budget it wraps unless it changes the answer.
    """

    def k(self, source: str) -> int:
        """The most tokens drafter `source` may propose (0: it must not propose)."""

    def p_min(self, source: str) -> float:
        """Stop drafting once the drafter's confidence in its next token falls below this."""

    def limit(self, source: str) -> int:
        """The most tokens any proposal may hold this cycle: the user's fixed K, or K = auto's
        ceiling. A drafter that weighs each proposal itself (the lookups) asks this instead of
        `k`, K = auto's pick from its averages."""

    def plan(self, source: str) -> DraftPlan | None:
        """K = auto's plan for a drafter that prices each token by its own confidence
        (draftplan.py), asked after `k` in the same cycle; None: draft up to `k` tokens."""

    @property
    def fallback(self) -> str:
        """The `source` of the drafter that proposes if this one does not (a chain's next
        member, `chain.AheadOf`); "" when none does. A lookup weighs its proposal against it."""

    def hands_over(self, context: Sequence[int], drafted: Sequence[int]) -> bool:
        """Asked by a drafter that runs a network after each token it drafts (`drafted`, after
        `context`): True when a lookup ahead of it in a chain would propose from there
        (`chain.Behind`). It then stops, and the lookup proposes the rest next cycle for free."""

    def row_cost(self, rows: int) -> float | None:
        """K = auto's measured cost of a target pass over `rows` rows, in plain one-row passes;
        None before anything is measured, or with a fixed K (the lookups' gate, lookup_gate.py)."""

    def best_speedup(self, source: str) -> float | None:
        """K = auto's best expected speed-up of drafter `source` at any K it may pick; None before
        it has measured `source`, or with a fixed K (a lookup ahead of that drafter must beat it)."""

    def measure_rows(self, longest: int) -> int | None:
        """A pass size (at most `longest` rows) K = auto asks a lookup to verify this cycle instead
        of the length it chose, to price the sizes between those it has measured; None: nothing
        to measure now, or with a fixed K. Asked only by a lookup about to propose."""

    def probing(self, source: str) -> bool:
        """Asked after `k`: this cycle is K = auto's probe of drafter `source`, held at K = 0 for a
        while (a draft model far behind then reads only its window, `drafters.model`)."""


class BudgetDefaults:
    """The answers of a budget that has nothing to say beyond its K: no plan, no chain around
    it, nothing measured. A budget inherits these and overrides what it knows."""

    def plan(self, source: str) -> DraftPlan | None:
        return None

    @property
    def fallback(self) -> str:
        return ""

    def hands_over(self, context: Sequence[int], drafted: Sequence[int]) -> bool:
        return False

    def row_cost(self, rows: int) -> float | None:
        return None

    def best_speedup(self, source: str) -> float | None:
        return None

    def measure_rows(self, longest: int) -> int | None:
        return None

    def probing(self, source: str) -> bool:
        return False


@dataclass(frozen=True)
class FixedBudget(BudgetDefaults):
    """The same K for every drafter, and no early stop: what `-k N` asks for."""

    fixed_k: int

    def k(self, source: str) -> int:
        return self.fixed_k

    def p_min(self, source: str) -> float:
        return 0.0

    def limit(self, source: str) -> int:
        return self.fixed_k


@dataclass(frozen=True)
class BudgetView:
    """Another budget seen through a wrapper: every question passed on to `inner`. A wrapper
    subclasses this and overrides what it changes (`CappedBudget`, `chain.AheadOf`, `chain.Behind`)."""

    inner: Budget

    def k(self, source: str) -> int:
        return self.inner.k(source)

    def p_min(self, source: str) -> float:
        return self.inner.p_min(source)

    def limit(self, source: str) -> int:
        return self.inner.limit(source)

    def plan(self, source: str) -> DraftPlan | None:
        return self.inner.plan(source)

    @property
    def fallback(self) -> str:
        return self.inner.fallback

    def hands_over(self, context: Sequence[int], drafted: Sequence[int]) -> bool:
        return self.inner.hands_over(context, drafted)

    def row_cost(self, rows: int) -> float | None:
        return self.inner.row_cost(rows)

    def best_speedup(self, source: str) -> float | None:
        return self.inner.best_speedup(source)

    def measure_rows(self, longest: int) -> int | None:
        return self.inner.measure_rows(longest)

    def probing(self, source: str) -> bool:
        return self.inner.probing(source)


@dataclass(frozen=True)
class CappedBudget(BudgetView):
    """The cycle's budget, as the generator sets it: the user's K or K = auto (`inner`), never
    more than `cap` tokens (max_tokens left, context room, rollback, the drafter's max K).

    It notes what it gave each drafter (`given`), which the generator reads back after the step
    as the cycle's K in the stats (`given_to`)."""

    cap: int
    given: dict[str, int] = field(default_factory=dict)
    """Drafter `source` -> the K (or ceiling) it was given this cycle, the last it asked for."""

    def k(self, source: str) -> int:
        self.given[source] = max(0, min(self.inner.k(source), self.cap))
        return self.given[source]

    def limit(self, source: str) -> int:
        self.given[source] = max(0, min(self.inner.limit(source), self.cap))
        return self.given[source]

    def plan(self, source: str) -> DraftPlan | None:
        wanted = self.inner.plan(source)
        if wanted is None:
            return None
        return replace(wanted, max_tokens=min(wanted.max_tokens, self.cap), max_nodes=min(wanted.max_nodes, self.cap))

    def given_to(self, source: str) -> int:
        """The K this cycle gave drafter `source`; when it asked for none (no drafter proposed),
        the most it gave any drafter."""
        return self.given.get(source, max(self.given.values(), default=0))


class Drafter(Protocol):
    """One way of proposing tokens; each kind lives in its own module of this package."""

    source: str
    """Short name used in stats, colouring and K = auto (`model`, `ngram`, `suffix`, `mtp`)."""
    label: str
    """What the panel and bench call it, e.g. "draft model gemma-3-270m-draft-q4_0.gguf"."""
    max_k: int
    """The most tokens it can propose in one cycle (MTP heads chain only so far)."""

    def prefill(self, context: Sequence[int]) -> None:
        """Read a new prompt (so its cost counts as prompt processing, not decoding)."""

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        """Up to `budget.k(self.source)` tokens to follow `context`."""

    def feedback(self, result: Feedback) -> None:
        """After the verify pass of a cycle in which this drafter proposed."""

    def reset(self) -> None:
        """Forget any cached context."""

    def close(self) -> None: ...
