"""What K = auto has measured about one drafter (`autodraft.py` prices its k from these): its
acceptance by position, its cost per call and per token, the calibration of its confidence, and
the state of its hold (idle cycles, probes, the k last priced)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spectui.engine.planning.passcosts import _Running
from spectui.engine.step.draftplan import Calibration
from spectui.limits import MAX_DRAFT

if TYPE_CHECKING:
    from spectui.engine.step.speculative import StepResult

ACCEPT_DECAY = 0.97  # weight of history in the acceptance estimates (about the last 30)
PROBE_EVERY = 8  # cycles at k = 0 before the first probe (then twice as long after each)
STEADY_CATCH_UP = 2  # tokens a draft reads before drafting when it kept up with the last cycle
POSITION_PRIOR = 2.0  # weight of the pooled acceptance in each position's estimate


@dataclass
class DrafterFigures:
    """What K = auto has measured about one drafter."""

    hits: list[float] = field(default_factory=lambda: [0.0] * MAX_DRAFT)
    trials: list[float] = field(default_factory=lambda: [0.0] * MAX_DRAFT)
    accepted: float = 2.0  # pooled prior: acceptance about 0.67
    rejected: float = 1.0
    cost: _Running = field(default_factory=_Running)
    judged_confidence: float = 2.0  # prior: confidence is calibrated (factor 1)
    judged_accepted: float = 2.0
    idle_cycles: int = 0
    probe_every: int = PROBE_EVERY
    probing: bool = False
    returning: bool = False
    """This cycle it drafts again after a hold for its cost, its pricing alone having moved (not
    through a probe): a draft model reads only the last window of what it missed, and the cycle
    counts in the probe budget, as a probe does (`AutoDraft.probing`)."""
    kept_up: bool = False
    """Its last ask gave it a k > 0: it drafted then (a probe too), so it has read the text."""
    probe_again: bool = False
    """The probe's cycle caught up on the hold first (not a typical cost): probe one more cycle,
    whose cost is measured."""
    cost_stale: bool = False
    """Costs measured before a hold may be stale: the next steady measurement replaces them (kept
    until then, so a probe whose draft must first catch up does not leave nothing to plan on)."""
    last_k: int = 0
    """The k picked for the current cycle (a plan prices its tokens at that speed-up)."""
    priced: tuple[float, ...] = ()
    """The `evidence` `last_k` was priced from (`AutoDraft._best_k`)."""
    reprice_in: int = 0
    """Asks while held before its k is priced again though its figures did not move."""
    said: tuple[object, ...] = ()
    """What its `HoldBack` was last worked out from (`AutoDraft._hold`)."""
    longest: int = 0
    """The longest chain it was measured on: acceptance past it is a guess (`GROWTH`)."""
    by_confidence: Calibration = field(default_factory=Calibration)
    """Chance of acceptance by the drafter's own confidence (draftplan.py)."""

    @property
    def acceptance(self) -> float:
        """Accepted / judged tokens over recent cycles, all positions pooled."""
        return self.accepted / (self.accepted + self.rejected)

    @property
    def calibration(self) -> float:
        """Acceptances per unit of drafter confidence, over recently judged tokens."""
        return self.judged_accepted / self.judged_confidence

    @property
    def measured(self) -> bool:
        return self.cost.n > 0

    @property
    def evidence(self) -> tuple[float, ...]:
        """What its pricing and its hold's reason are worked out from, in a form that changes
        whenever a draft of it is judged or a call of it timed (held, it stays put between probes)."""
        return self.accepted, self.rejected, self.cost.n, self.longest

    def position_acceptances(self, k: int) -> list[float]:
        """Chance that token i (0-based) is accepted given tokens 0..i-1 were, for i < k.

        Each position's own record, shrunk towards the position before it (the first towards all
        positions pooled): a position rarely tried is taken to be about as likely as the one
        before, since the tokens that survive to it are the draft's easier ones. Shrinking towards
        the pooled figure instead made every untried position look like the average, so K = auto
        never tried the longer drafts that pay when sampling."""
        rates, prior = [], min(self.acceptance, 0.999)
        for i in range(k):
            prior = (self.hits[i] + POSITION_PRIOR * prior) / (self.trials[i] + POSITION_PRIOR)
            rates.append(prior)
        return rates

    def position_acceptance(self, i: int) -> float:
        return self.position_acceptances(i + 1)[i]

    def draft_cost(self, k: int) -> float:
        c_call, c_unit = self.cost.coefficients()
        return c_call + c_unit * k

    def observe(self, step: StepResult) -> None:
        proposal = step.proposal
        if proposal.work == 0 and not proposal.tokens:
            return  # held at k = 0, or a lookup that withheld: nothing ran worth pricing
        if proposal.caught_up <= STEADY_CATCH_UP:  # a long catch-up is not a typical cost
            if self.cost_stale:
                self.cost, self.cost_stale = _Running(), False
            self.cost.add(proposal.work, step.draft_seconds)
        elif self.probing and self.cost_stale:
            self.probe_again = True  # measure the cost on a steady cycle next
        if proposal.calibrated:
            path = step.path if proposal.is_tree else range(step.accepted)
            self.by_confidence.observe(proposal.parents, proposal.confidences, path)
        # Per position: a tree's first choices are a chain, judged up to its first rejection.
        drafted = proposal.main_chain()
        self.longest = max(self.longest, drafted)
        accepted = step.accepted if not proposal.is_tree else next(
            (i for i, node in enumerate(step.path) if node != i), len(step.path))
        accepted = min(accepted, drafted)
        if drafted == 0:
            return
        rejected = accepted < drafted
        for i in range(min(accepted + rejected, MAX_DRAFT)):  # positions up to the first rejection
            self.hits[i] = ACCEPT_DECAY * self.hits[i] + (i < accepted)
            self.trials[i] = ACCEPT_DECAY * self.trials[i] + 1.0
        self.accepted = ACCEPT_DECAY * self.accepted + accepted
        self.rejected = ACCEPT_DECAY * self.rejected + rejected
        judged = proposal.confidences[: accepted + rejected]
        if judged:
            self.judged_confidence = ACCEPT_DECAY * self.judged_confidence + sum(judged)
            self.judged_accepted = ACCEPT_DECAY * self.judged_accepted + accepted
