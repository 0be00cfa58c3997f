"""Pricing each drafted token on its own: K = auto's plan for a drafter that reads its own q.

K = auto's `k` prices a whole draft from averages per position. A draft model knows more about
each token it draws: its own probability of it, c. On the demo-base pair at T = 0.8 the chance
that the target accepts a first-choice token rises from about 0.44 when c < 0.1 to 0.98 when
c > 0.9, and 60 % of the tokens sit in that last bucket (measured over 640 positions of sampled
text, five prompts). So a plan prices every token, and every extra candidate, as it is drawn:

    reach_i   = a(c_1) · … · a(c_i)       chance the first i first-choice tokens are all accepted
    value     = reach_{i-1} · a(c_i)      chance token i ends up on the accepted path
    sibling j = reach_{i-1} · (1 - a(c_i)) · Π_{l<j} (1 - s(c_l)) · s(c_j)

where a(c) is the calibrated chance a first-choice token with confidence c is accepted, and
s(c) the chance a later candidate is accepted once the ones before it were rejected (a residual
of p remains: see tree.py). A token or candidate is worth its verify row when its value is at
least `row_value`; the drafter draws another token while reach · (average acceptance) is at
least `draft_value`. Both thresholds are costs in units of tokens at this drafter's current
speed-up R: an item of value v and cost c raises tokens per second iff v / c ≥ E / C = R / v(1).

a and s are tables over ten confidence buckets, each a decayed count of judged tokens with a
prior of `PRIOR_WEIGHT` judgements at the curve measured on the demo-base pair (below), so a
new pair starts there and moves to its own figures within a few dozen cycles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spectui.engine.step.sampling import Dist

BUCKETS = 10
DECAY = 0.99  # about the last 100 judgements per bucket
PRIOR_WEIGHT = 3.0


def first_choice_prior(c: float) -> float:
    """a(c) measured on the demo-base pair at T = 0.8: 0.44 at c < 0.1, 0.68 at 0.3-0.5, 0.78 at
    0.5-0.7, 0.88 at 0.7-0.9, 0.98 above (scripts/bench_trees.py --calibrate prints it)."""
    return min(0.4 + 0.6 * c, 0.99)


def later_choice_prior(c: float) -> float:
    """s(c) on the same text: 0.22 at c < 0.05, 0.36-0.40 at 0.05-0.2, 0.50 at 0.2-0.3, 0.72 above."""
    return min(0.25 + 1.2 * c, 0.8)


@dataclass
class ConfidenceTable:
    """Calibrated chance of acceptance by the drafter's confidence c, in ten buckets."""

    prior: str = "first"
    hits: list[float] = field(default_factory=lambda: [0.0] * BUCKETS)
    trials: list[float] = field(default_factory=lambda: [0.0] * BUCKETS)

    def chance(self, confidence: float) -> float:
        b = _bucket(confidence)
        prior = (first_choice_prior if self.prior == "first" else later_choice_prior)((b + 0.5) / BUCKETS)
        return (self.hits[b] + PRIOR_WEIGHT * prior) / (self.trials[b] + PRIOR_WEIGHT)

    def add(self, confidence: float, accepted: bool) -> None:
        b = _bucket(confidence)
        self.hits[b] = DECAY * self.hits[b] + accepted
        self.trials[b] = DECAY * self.trials[b] + 1.0


def _bucket(confidence: float) -> int:
    return min(max(int(confidence * BUCKETS), 0), BUCKETS - 1)


@dataclass
class Calibration:
    """Both tables for one drafter (K = auto keeps greedy and sampled replies apart)."""

    first: ConfidenceTable = field(default_factory=ConfidenceTable)
    later: ConfidenceTable = field(default_factory=lambda: ConfidenceTable(prior="later"))

    def observe(self, parents: Sequence[int], confidences: Sequence[float], path: Sequence[int]) -> None:
        """Every candidate the target judged: its parent was reached and the siblings drawn
        before it were rejected. `parents` empty: a chain."""
        on_path = set(path)
        reached = {-1, *on_path}
        tried: dict[int, int] = {}  # children of each reached parent judged so far
        for i, confidence in enumerate(confidences):
            parent = parents[i] if parents else i - 1
            if parent not in reached or tried.get(parent, 0) < 0:
                continue  # not judged: its parent was rejected, or a sibling before it accepted
            table = self.first if tried.get(parent, 0) == 0 else self.later
            table.add(confidence, i in on_path)
            tried[parent] = -1 if i in on_path else tried.get(parent, 0) + 1


@dataclass(frozen=True)
class DraftPlan:
    """What K = auto lets a drafter that prices its own tokens draft this cycle."""

    max_tokens: int
    """The longest chain of first choices."""
    row_value: float
    """A token or candidate pays for its verify row when its chance of being accepted is at
    least this."""
    draft_value: float
    """Another draft pass pays when the chance its token is accepted is at least this."""
    mean_acceptance: float
    """The drafter's average chance of acceptance for a token not yet drawn."""
    max_nodes: int
    """The most tokens in all, candidates included (the target's verify rows, less `last`)."""
    max_leaves: int
    """The most branches (0 or 1: chains only, e.g. the target cannot verify a tree)."""
    calibration: Calibration

    def first(self, confidence: float) -> float:
        return self.calibration.first.chance(confidence)

    def later(self, confidence: float) -> float:
        return self.calibration.later.chance(confidence)


Candidate = tuple[int, "Dist | None", float]
"""A candidate beside a first choice: (token, the q it was drawn from or None, confidence)."""


class Planner:
    """One cycle of a plan, as a drafter draws its first choices one by one.

    The drafter asks `take(c)` for each first choice (c: its own probability of it), then
    `candidates(...)` for the tokens worth a row beside it, and `go_on()` before paying for the
    next draft pass. Candidates are added after the chain (`finish`), so the first choices stay
    a chain at the front of the proposal and every parent's children keep the order drawn.
    """

    def __init__(self, plan: DraftPlan, price_chain: bool = True) -> None:
        self.plan = plan
        self.price_chain = price_chain
        """Stop the chain where a token's value falls below its row (False: only candidates)."""
        self.reach = 1.0
        """Chance that every first choice so far is accepted."""
        self.chain = 0
        self.pending: list[tuple[int, Candidate]] = []  # (parent index, candidate)

    @property
    def nodes(self) -> int:
        return self.chain + len(self.pending)

    def take(self, confidence: float) -> bool:
        """Whether the first choice just drawn pays for its verify row (the first always goes:
        K = auto already found that drafting pays)."""
        if self.chain > 0 and (self.nodes >= self.plan.max_nodes or (self.price_chain and
                               self.reach * self.plan.first(confidence) < self.plan.row_value)):
            return False
        self.chain += 1
        return True

    def candidates(self, confidence: float, more: Callable[[list[int]], Candidate | None], first: int) -> None:
        """After first choice `first` (the chain's last token, confidence c) is taken: draw later
        candidates for its position with `more(tokens drawn so far)` while each pays for its row."""
        parent = self.chain - 2  # the first choice's parent: the token before it, -1 for the context
        rejected = self.reach * (1.0 - self.plan.first(confidence))
        drawn = [first]
        while self.nodes < self.plan.max_nodes and 1 + len(self.pending) < self.plan.max_leaves:
            if rejected * self.plan.later(1.0) < self.plan.row_value:
                break  # not even a certain candidate would pay: draw nothing
            candidate = more(drawn)
            if candidate is None:
                break
            chance = self.plan.later(candidate[2])
            if rejected * chance < self.plan.row_value:
                break
            self.pending.append((parent, candidate))
            drawn.append(candidate[0])
            rejected *= 1.0 - chance
        self.reach *= self.plan.first(confidence)

    def go_on(self) -> bool:
        """Whether another draft pass pays: its token's chance of acceptance, at the plan's
        average, is worth a pass and a row."""
        if self.chain >= self.plan.max_tokens or self.nodes >= self.plan.max_nodes:
            return False
        return not self.price_chain or self.reach * self.plan.mean_acceptance >= self.plan.draft_value

    def finish(self, add: Callable[[int, Candidate], None]) -> None:
        """Hand the candidates to the proposal, after the chain."""
        for parent, candidate in self.pending:
            add(parent, candidate)
