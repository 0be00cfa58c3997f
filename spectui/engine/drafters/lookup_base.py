"""What the draftless drafters share: find a candidate continuation, estimate, propose or withhold.

A lookup drafter (`ngram`, `suffix`) only says where a continuation comes from (`find`: the
tokens, the raw cumulative probabilities its evidence supports, and a bucket naming the kind of
evidence). This class turns that into a `Proposal`: calibrated estimates (`lookup_gate.Calibration`),
trimmed where a token is unlikely, and withheld when the whole is not worth its verify rows or the
draft model behind it (`lookup_gate.min_score`). Proposed tokens are point masses (q = None, exact
at any temperature) and cost no forward pass (`work = 0`).

Every candidate is judged, proposed or not: on the next call, the tokens the context gained since
are the target's own continuation (accepted tokens, then the target's token, and at T > 0 a
sample distributed exactly as the target's), so how far the candidate agreed with them is what
the target would have accepted. A withheld candidate thus still teaches the calibration, and a
lookup that starts out doubted in a chain can earn its place.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from spectui.engine.drafters import lookup_gate
from spectui.engine.drafters.lookup_gate import Calibration
from spectui.engine.drafters.token_index import as_token_list, common_prefix
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.step.drafter import Budget, Feedback, Proposal
from spectui.limits import MAX_LOOKUP_DRAFT

SHADOW_K = 8
"""Tokens looked up (to be judged, not proposed) in a cycle where the budget allows none."""
SHADOW_EVERY = 4
"""Cycles between two such look-ups while the budget allows none (K = auto's guard holds the
lookup, or the reply is about to end): the judging goes on, at a quarter of the search's cost a
cycle (the suffix lookup's search was the dearest part of a held cycle, issue #35)."""


@dataclass(frozen=True)
class Candidate:
    """A continuation a lookup found for the context, and its evidence."""

    tokens: list[int]
    raw: list[float]
    """raw[i]: the lookup's own estimate that tokens[0..i] all follow (count ratios)."""
    bucket: Hashable
    """The kind of evidence (e.g. the n-gram length): calibrated separately."""


@dataclass(frozen=True)
class _Awaiting:
    """A candidate waiting to be judged against the context's continuation."""

    candidate: Candidate
    greedy: bool
    at: int
    """len(context) when it was found: the continuation starts there."""
    anchor: int
    """context[at - 1], to tell the same context grown from another one."""


class LookupDrafter:
    """Base of the draftless drafters; subclasses define `source`, `label` and `find`."""

    source = ""
    label = ""
    max_k = MAX_LOOKUP_DRAFT
    """At K = auto; a fixed K caps it as it caps every drafter."""
    rests_when_held = True
    """Held, it may go unasked for cycles (`AutoDraft.rests`): it reads the context when next asked."""

    def __init__(self, *, gated: bool = True, min_token_prob: float = lookup_gate.MIN_TOKEN_PROB) -> None:
        """`gated=False` proposes every candidate in full (tests of the step)."""
        self.gated = gated
        self.min_token_prob = min_token_prob
        self.calibration = Calibration()
        self._awaiting: _Awaiting | None = None
        self._shadow_at = -SHADOW_EVERY
        """The context's length at the last look-up allowing no proposal: the next comes
        `SHADOW_EVERY` tokens on (counted in tokens, so cycles that did not ask count too)."""

    def find(self, context: list[int], k: int) -> Candidate | None:
        """Up to `k` tokens that may follow `context`, or None."""
        raise NotImplementedError

    def offered(self, candidate: Candidate, n: int) -> None:
        """The first `n` tokens of `candidate` were proposed (0: withheld)."""

    def prefill(self, context: Sequence[int]) -> None:
        self._awaiting = None

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        tokens = as_token_list(context)
        self.judge(tokens)
        proposal = Proposal(source=self.source)
        k = self._allowed(budget)
        if k <= 0:
            if abs(len(tokens) - self._shadow_at) < SHADOW_EVERY:
                return proposal  # nothing may be proposed: look up to be judged only now and then
            self._shadow_at = len(tokens)
        planned = self._plan(tokens, budget, cfg, k)
        if planned is None:
            return proposal
        candidate, estimates, n = planned
        if self.gated and n > 0:
            n = lookup_gate.measured_length(self._trimmed(estimates, budget, cfg, k), budget, n)
        self._awaiting = _Awaiting(candidate, cfg.greedy, len(tokens), tokens[-1])
        previous = 1.0
        for token, estimate in zip(candidate.tokens[:n], estimates[:n], strict=True):
            proposal.add(token, None, estimate / previous if previous > 0 else 0.0)
            previous = estimate
        self.offered(candidate, n)
        return proposal

    def would_propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig) -> bool:
        """Whether `propose` would propose something after `context`; learns nothing (a draft
        model behind this lookup asks after each token it drafts: `chain.Behind`)."""
        k = self._allowed(budget)
        planned = self._plan(as_token_list(context), budget, cfg, k) if k > 0 else None
        return planned is not None and planned[2] > 0

    def _plan(self, tokens: list[int], budget: Budget, cfg: SamplingConfig,
              k: int) -> tuple[Candidate, list[float], int] | None:
        """The candidate for `tokens` (looked up to be judged only when `k` is 0), its calibrated
        estimates, and how many of its tokens to propose; None when nothing was found."""
        candidate = self.find(tokens, k if k > 0 else SHADOW_K)
        if candidate is None or not candidate.tokens:
            return None
        estimates = self.calibration.estimate(cfg.greedy, candidate.bucket, candidate.raw)
        n = self._length(estimates, budget, cfg, k) if self.gated else min(len(candidate.tokens), k)
        return candidate, estimates, n

    def _allowed(self, budget: Budget) -> int:
        """The most this lookup may propose: the budget's ceiling when the gate weighs each
        proposal (K = auto's pick averages over proposals of every confidence), else its K."""
        return budget.limit(self.source) if self.gated else budget.k(self.source)

    def _length(self, estimates: list[float], budget: Budget, cfg: SamplingConfig, k: int) -> int:
        """How many tokens to propose: 0 unless the expected accepted count pays for them."""
        if k <= 0:
            return 0
        return lookup_gate.best_length(self._trimmed(estimates, budget, cfg, k), budget, budget.fallback, k)

    def _trimmed(self, estimates: list[float], budget: Budget, cfg: SamplingConfig, k: int) -> list[float]:
        """The estimates of the leading tokens worth a verify row at all (`lookup_gate.trim`)."""
        p_min = budget.p_min(self.source) if cfg.greedy else 0.0
        return estimates[:lookup_gate.trim(estimates[:k], self.min_token_prob, p_min)]

    def judge(self, context: list[int]) -> int | None:
        """Judge the last candidate against how `context` went on; returns the tokens it got right
        (None when the context is another one, or did not grow)."""
        awaiting, self._awaiting = self._awaiting, None
        if awaiting is None or len(context) <= awaiting.at or context[awaiting.at - 1] != awaiting.anchor:
            return None
        candidate = awaiting.candidate
        actual = context[awaiting.at:awaiting.at + len(candidate.tokens)]
        right = common_prefix(candidate.tokens[:len(actual)], actual)
        judged = right + 1 if right < len(actual) else right  # the first wrong token, if seen
        self.calibration.observe(awaiting.greedy, candidate.bucket, candidate.raw[:judged], right)
        return right

    def feedback(self, result: Feedback) -> None:
        """Nothing: the next call judges the candidate against the context (same verdict)."""

    def reset(self) -> None:
        self._awaiting = None

    def close(self) -> None:
        """Nothing to free beyond Python memory."""
