"""K = auto: pick each cycle's draft length from measured acceptance and measured costs.

With per-token acceptance a (geometric model), a cycle that drafts k tokens yields on average
E(k) = (1 - a^(k+1)) / (1 - a) tokens and costs k·c_draft + c_verify(k + 1) seconds, where the
verify cost grows with the batch as v0 + v1·(k + 1). Speedup over plain decoding is
E(k) · c_verify(1) / cost(k); we choose the k that maximizes it, and k = 0 when none beats 1.
While at k = 0 a cheap probe cycle keeps the estimate of a fresh, so speculation comes back when
the text turns predictable again.

Within a cycle the draft also stops early when it is unsure: one more draft token pays only if
its chance of acceptance (the draft's own top probability stands in for it) beats what it costs
in units of a plain target step, (c_draft + v1) / (v0 + v1). That threshold is `p_min`, measured
rather than fixed: on the demo pair it is about 0.4; a draft nearly as slow as its target gets
close to 1 and stops drafting on anything it is not sure of.
"""

from __future__ import annotations

from collections import deque

from spectui.engine.config import MAX_DRAFT

DECAY = 0.9  # weight of history in the running estimates (about the last 10 cycles)
PROBE_EVERY = 8  # cycles at k = 0 between probes
PROBE_K = 2
DEFAULT_P_MIN = 0.5  # before any cost is measured


class AutoDraft:
    """Online estimates of acceptance and costs, and the draft length they call for."""

    def __init__(self, max_k: int = MAX_DRAFT) -> None:
        self.max_k = max_k
        self._accepted = 2.0  # prior: acceptance about 0.67
        self._rejected = 1.0
        self._draft_token_seconds: float | None = None
        self._verify: deque[tuple[int, float]] = deque(maxlen=32)  # (batch rows, seconds)
        self._idle_cycles = 0

    @property
    def acceptance(self) -> float:
        return self._accepted / (self._accepted + self._rejected)

    def observe(self, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float,
                draft_decodes: int | None = None) -> None:
        """Record a cycle. Draft cost is per forward pass (a draft cut short still paid for the
        pass that found it unsure), so short drafts do not look dearer per token than they are."""
        self._verify.append((drafted + 1, verify_seconds))
        decodes = drafted if draft_decodes is None else draft_decodes
        if decodes > 0:
            per_token = draft_seconds / decodes
            old = self._draft_token_seconds
            self._draft_token_seconds = per_token if old is None else DECAY * old + (1 - DECAY) * per_token
        if drafted == 0:
            return
        rejected = 1.0 if accepted < drafted else 0.0
        self._accepted = DECAY * self._accepted + accepted
        self._rejected = DECAY * self._rejected + rejected

    def choose(self) -> int:
        if self._draft_token_seconds is None or not self._verify:
            return 4  # nothing measured yet: a moderate first guess
        best_k, best_gain = 0, 1.0
        for k in range(1, self.max_k + 1):
            gain = self.expected_speedup(k)
            if gain > best_gain:
                best_k, best_gain = k, gain
        if best_k == 0:
            self._idle_cycles += 1
            if self._idle_cycles % PROBE_EVERY == 0:
                return PROBE_K
        else:
            self._idle_cycles = 0
        return best_k

    def p_min(self) -> float:
        """Stop a draft when its top probability falls below the cost of one more token."""
        if self._draft_token_seconds is None or not self._verify:
            return DEFAULT_P_MIN
        v0, v1 = self._verify_cost_line()
        return min(max((self._draft_token_seconds + v1) / (v0 + v1), 0.05), 0.95)

    def expected_speedup(self, k: int) -> float:
        a = min(self.acceptance, 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        v0, v1 = self._verify_cost_line()
        plain = v0 + v1
        cost = k * (self._draft_token_seconds or 0.0) + v0 + v1 * (k + 1)
        return tokens * plain / cost if cost > 0 else 0.0

    def _verify_cost_line(self) -> tuple[float, float]:
        """Least-squares fit of verify seconds = v0 + v1·rows over recent cycles."""
        n = len(self._verify)
        mean_x = sum(x for x, _ in self._verify) / n
        mean_y = sum(y for _, y in self._verify) / n
        var_x = sum((x - mean_x) ** 2 for x, _ in self._verify)
        if var_x == 0:
            # One batch size seen so far: assume rows beyond the first cost 5 % each.
            v1 = 0.05 * mean_y / (1 + 0.05 * (mean_x - 1))
        else:
            v1 = max(0.0, sum((x - mean_x) * (y - mean_y) for x, y in self._verify) / var_x)
        return max(mean_y - v1 * mean_x, 1e-6), v1
