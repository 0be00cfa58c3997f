"""K = auto: pick each cycle's draft length from measured acceptance and measured costs.

With per-token acceptance a (geometric model), a cycle that drafts k tokens yields on average
E(k) = (1 - a^(k+1)) / (1 - a) tokens and costs k·c_draft + v(k + 1) seconds, where v(n) is the
target's verify pass over n rows. Speedup over plain decoding is E(k) · v(1) / cost(k); we choose
the k that maximizes it, and k = 0 when none beats 1. While at k = 0 a cheap probe cycle keeps
the estimate of a fresh, so speculation comes back when the text turns predictable again.

v(n) is a table of running averages per batch size, not a fitted line: llama.cpp's CPU kernels
are not even monotonic in n (on the demo pair a 2-row pass took longer than a 4-row one).
Sizes not yet seen are interpolated from their measured neighbours.

Within a cycle the draft also stops early when it is unsure: one more draft token pays only if
its chance of acceptance beats its cost in units of a plain target step, c_draft / v(1). The
draft's own top probability stands in for that chance, scaled by a running calibration
(accepted tokens / summed confidence of the tokens the target judged), because it under-states
acceptance when sampling and over-states it for a poorly matched draft.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spectui.engine.config import MAX_DRAFT

if TYPE_CHECKING:
    from spectui.engine.speculative import StepResult

DECAY = 0.9  # weight of history in the running estimates (about the last 10 cycles)
PROBE_EVERY = 8  # cycles at k = 0 between probes
PROBE_K = 2
DEFAULT_P_MIN = 0.5  # before any cost is measured
UNSEEN_ROW_COST = 0.05  # with one batch size measured: each further row costs 5 % of it
STEADY_CATCH_UP = 2  # tokens a draft reads before drafting when it kept up with the last cycle


class AutoDraft:
    """Online estimates of acceptance and costs, and the draft length they call for."""

    def __init__(self, max_k: int = MAX_DRAFT) -> None:
        self.max_k = max_k
        self._accepted = 2.0  # prior: acceptance about 0.67
        self._rejected = 1.0
        self._draft_seconds: float | None = None  # per draft forward pass
        self._verify_seconds: dict[int, float] = {}  # batch rows -> running mean seconds
        self._judged_confidence = 2.0  # prior: confidence is calibrated (factor 1)
        self._judged_accepted = 2.0
        self._idle_cycles = 0
        self.probing = False
        """True when the last `choose` returned a probe."""

    @property
    def acceptance(self) -> float:
        return self._accepted / (self._accepted + self._rejected)

    @property
    def calibration(self) -> float:
        """Acceptances per unit of draft confidence, over recently judged draft tokens."""
        return self._judged_accepted / self._judged_confidence

    def observe(self, step: StepResult) -> None:
        """Record a cycle. Draft cost is per forward pass (a draft cut short still paid for the
        pass that found it unsure), so short drafts do not look dearer per token than they are;
        a pass that first caught up on many tokens (after cycles at k = 0) is not typical and is
        left out of the cost."""
        drafted, accepted = step.drafted, step.accepted
        rows = drafted + 1
        old = self._verify_seconds.get(rows)
        self._verify_seconds[rows] = step.verify_seconds if old is None else _ema(old, step.verify_seconds)
        if step.draft_decodes > 0 and step.draft_caught_up <= STEADY_CATCH_UP:
            per_pass = step.draft_seconds / step.draft_decodes
            self._draft_seconds = per_pass if self._draft_seconds is None else _ema(self._draft_seconds, per_pass)
        if drafted == 0:
            return
        self._accepted = DECAY * self._accepted + accepted
        self._rejected = DECAY * self._rejected + (accepted < drafted)
        judged = step.draft_confidences[: accepted + (accepted < drafted)]  # up to the first rejection
        if judged:
            self._judged_confidence = DECAY * self._judged_confidence + sum(judged)
            self._judged_accepted = DECAY * self._judged_accepted + accepted

    def choose(self) -> int:
        self.probing = False
        if self._draft_seconds is None or not self._verify_seconds:
            return 4  # nothing measured yet: a moderate first guess
        best_k, best_gain = 0, 1.0
        for k in range(1, self.max_k + 1):
            gain = self.expected_speedup(k)
            if gain > best_gain:
                best_k, best_gain = k, gain
        if best_k == 0:
            self._idle_cycles += 1
            if self._idle_cycles % PROBE_EVERY == 0:
                self.probing = True
                return PROBE_K
        else:
            self._idle_cycles = 0
        return best_k

    def p_min(self) -> float:
        """Stop a draft when its calibrated confidence falls below the cost of one more token.

        A probe drafts its tokens whatever the confidence: it is there to measure acceptance."""
        if self.probing:
            return 0.0
        if self._draft_seconds is None or not self._verify_seconds:
            return DEFAULT_P_MIN
        cost = self._draft_seconds / self.verify_cost(1)
        return min(max(cost / max(self.calibration, 1e-3), 0.02), 0.95)

    def expected_speedup(self, k: int) -> float:
        a = min(self.acceptance, 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        cost = k * (self._draft_seconds or 0.0) + self.verify_cost(k + 1)
        return tokens * self.verify_cost(1) / cost if cost > 0 else 0.0

    def verify_cost(self, rows: int) -> float:
        """Seconds of a target pass over `rows` rows: measured, else from measured neighbours."""
        table = self._verify_seconds
        if rows in table:
            return table[rows]
        below = [n for n in table if n < rows]
        above = [n for n in table if n > rows]
        if below and above:
            lo, hi = max(below), min(above)
            return table[lo] + (table[hi] - table[lo]) * (rows - lo) / (hi - lo)
        nearest = max(below) if below else min(above)
        return table[nearest] * (1 + UNSEEN_ROW_COST * (rows - nearest))


def _ema(old: float, new: float) -> float:
    return DECAY * old + (1 - DECAY) * new
