"""When a lookup's match is worth proposing, shared by the draftless drafters (`ngram`, `suffix`).

A lookup costs nothing to run, but what it proposes is not free: the target verifies every
proposed token in its pass, and on a CPU a pass over 2+ rows costs noticeably more than a plain
one-row step (on the demo pair's CPU about 1.5x, judging by the README's sweep: K = 1 gave 1.08x
at 98 % acceptance, K = 8 1.85x). And in a chain
(`model+suffix`) a proposal from the lookup takes the cycle away from the draft model, which on
plain text is right ~90 % of the time. So each proposal is weighed by its *score*, the expected
number of accepted tokens (the sum of its cumulative acceptance estimates), against what the
alternative would give:

* alone, the alternative is a plain target step: propose when score >= v(n+1)/v(1) - 1 (the
  extra verify rows, in target steps);
* ahead of a draft model, the alternative is the model's proposal: propose when
  (1 + score) / v(n+1) >= the model's expected speed-up, i.e. score >= s_model·v(n+1)/v(1) - 1.

v and s_model come from K = auto's measurements (`Budget.row_cost`, `Budget.best_speedup`)
once it has them; with a fixed K, or before anything is measured, from fixed thresholds set from
acceptance counts on the demo pair (`ALONE_MIN_SCORE`, `CHAINED_MIN_SCORE`).

The acceptance estimates are the lookup's raw evidence (count ratios, how consistent the earlier
occurrences were), calibrated by what the target actually accepted (`Calibration`), per kind of
evidence (the n-gram length, the suffix match length and where it was found): one factor for the
first token, one for each later token given the one before it was accepted. A short match is
often right about the next token and wrong a few tokens on (a list whose number changes every
line), so both factors are learnt per kind, each starting from the figure shared by all kinds.
Greedy and sampled replies keep separate figures: a point-mass proposal d is accepted with p(d)
when sampling, which is lower than the 0/1 agreement of greedy decoding.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from spectui.engine.step.drafter import Budget

ALONE_MIN_SCORE = 0.5
"""Expected accepted tokens a lone lookup's proposal must promise before K = auto has measured
the verify pass (what a 2-row verify costs over a plain step on the demo pair's CPU)."""
CHAINED_MIN_SCORE = 2.0
"""Expected accepted tokens a lookup ahead of a draft model must promise before K = auto has
measured both (the demo pair's model yields about 1.7x at T = 0, and a lookup's first matches,
still judged by the prior alone, must not take cycles from it: 5 tokens at the prior promise 1.7)."""
CHAINED_MIN_FRACTION = 0.8
"""With a small K, a chained lookup needs score >= this x k instead (K = 1: the first token at
>= 0.8), so it can still win a cycle from the draft model."""
MIN_TOKEN_PROB = 0.1
"""Stop a proposal before a token whose cumulative estimate falls below this (vLLM's default for
suffix decoding): a verify row that will most likely be thrown away."""
MEASURE_LOSS = 0.2
"""The most of a cycle's expected rate a lookup gives up to have a pass size measured."""
DECAY = 0.98
"""Weight of older observations in the calibration (about the last 50 proposals count)."""
PRIOR_FIRST = 0.5
PRIOR_NEXT = 0.8
PRIOR_WEIGHT = 2.0


@dataclass
class _Ratio:
    """Observed successes over the raw probability the lookup claimed for them (with a prior)."""

    successes: float
    claimed: float

    @property
    def value(self) -> float:
        return self.successes / self.claimed

    def add(self, success: float, claimed: float) -> None:
        self.successes = DECAY * self.successes + success
        self.claimed = DECAY * self.claimed + claimed


def _prior(mean: float) -> _Ratio:
    return _Ratio(mean * PRIOR_WEIGHT, PRIOR_WEIGHT)


@dataclass
class Calibration:
    """Learned factors that turn a lookup's raw probabilities into acceptance estimates."""

    first: dict[tuple[bool, Hashable], _Ratio] = field(default_factory=dict)
    """(greedy, evidence bucket) -> accepted first tokens / claimed raw probability."""
    later: dict[tuple[bool, Hashable], _Ratio] = field(default_factory=dict)
    """(greedy, evidence bucket) -> accepted later tokens / claimed raw conditional probability
    (given the previous token was accepted)."""
    later_shared: dict[bool, _Ratio] = field(default_factory=dict)
    """greedy -> the same over every bucket: where a bucket's own figure starts."""
    first_shared: dict[bool, _Ratio] = field(default_factory=dict)
    """greedy -> accepted first tokens / claimed over every bucket: where a new bucket's first
    factor starts. With a fixed prior of one half each new kind of match was proposed a few times
    before it learnt what every kind had shown: at T 0.8 on a pair whose target samples widely,
    36 suffix proposals with 4 accepted in 18 short replies (issue #35's sweep, 2026-11-27)."""

    def estimate(self, greedy: bool, bucket: Hashable, raw: Sequence[float]) -> list[float]:
        """Cumulative acceptance estimates for a proposal whose raw cumulative probabilities are `raw`."""
        estimates: list[float] = []
        first = self.first.get((greedy, bucket)) or self._first_prior(greedy)
        later = self.later.get((greedy, bucket)) or self._later_prior(greedy)
        previous_raw = 1.0
        for i, prob in enumerate(raw):
            factor = first.value if i == 0 else later.value
            conditional = min(1.0, factor * prob / previous_raw) if previous_raw > 0 else 0.0
            estimates.append(conditional if i == 0 else estimates[-1] * conditional)
            previous_raw = prob
        return estimates

    def observe(self, greedy: bool, bucket: Hashable, raw: Sequence[float], accepted: int) -> None:
        """The target accepted the first `accepted` of the proposed tokens (raw probabilities `raw`)."""
        if not raw:
            return
        if (greedy, bucket) not in self.first:
            self.first[greedy, bucket] = self._first_prior(greedy)
        for ratio in (self.first[greedy, bucket], self.first_shared.setdefault(greedy, _prior(PRIOR_FIRST))):
            ratio.add(1.0 if accepted > 0 else 0.0, raw[0])
        if (greedy, bucket) not in self.later:
            self.later[greedy, bucket] = self._later_prior(greedy)
        ratios = (self.later[greedy, bucket], self.later_shared.setdefault(greedy, _prior(PRIOR_NEXT)))
        # Token i >= 1 was judged when token i - 1 was accepted; it succeeded when i < accepted.
        for i in range(1, min(accepted + 1, len(raw))):
            claimed = raw[i] / raw[i - 1] if raw[i - 1] > 0 else 0.0
            for ratio in ratios:
                ratio.add(1.0 if i < accepted else 0.0, claimed)

    def _first_prior(self, greedy: bool) -> _Ratio:
        """A new bucket's first factor: the shared figure so far, weighted as a prior."""
        shared = self.first_shared.get(greedy)
        return _prior(shared.value if shared is not None else PRIOR_FIRST)

    def _later_prior(self, greedy: bool) -> _Ratio:
        """A new bucket's later factor: the shared figure so far, weighted as a prior."""
        shared = self.later_shared.get(greedy)
        return _prior(shared.value if shared is not None else PRIOR_NEXT)


def trim(estimates: list[float], min_token_prob: float, p_min: float) -> int:
    """How many leading tokens to propose: cumulative estimate >= min_token_prob, and (K = auto's
    early stop) each token's own estimate >= p_min."""
    n, previous = 0, 1.0
    for estimate in estimates:
        if estimate < min_token_prob or (previous > 0 and estimate / previous < p_min):
            break
        n, previous = n + 1, estimate
    return n


def best_length(estimates: Sequence[float], budget: Budget, fallback: str, k: int) -> int:
    """How many of the leading tokens to propose (0: withhold): the length with the most expected
    tokens per verify pass-cost, when that beats the alternative.

    n proposed tokens yield 1 + S(n) tokens (S(n), the sum of the first n cumulative estimates,
    plus the target's own token) for one pass over n + 1 rows, which costs r(n + 1) plain passes
    (`Budget.row_cost`). The rate (1 + S(n)) / r(n + 1) must reach 1 alone (a plain step) or the
    fallback draft model's best expected speed-up s ahead of it: `min_score`'s thresholds, read
    at every length. On a CPU a pass can cost more per row past some size than below it (2026-11-27,
    2 threads, 1,700 tokens deep: 20 rows gave 17 % more tokens a second than 32 with every row
    kept, docs/BENCHMARKS.md), so the longest run a lookup trusts is not always the fastest. With
    nothing measured (a fixed K, K = auto's first cycles) the whole run is weighed as before.
    """
    n_max = len(estimates)
    if n_max == 0:
        return 0
    speedup = budget.best_speedup(fallback) if fallback else 1.0
    rates = rates_by_length(estimates, budget)
    if rates is None or speedup is None:
        return n_max if sum(estimates) >= min_score(budget, n_max + 1, fallback, k) else 0
    best_n, best_rate = 0, max(speedup, 1.0)
    for n, rate in enumerate(rates, start=1):
        if rate >= best_rate:
            best_n, best_rate = n, rate
    return best_n


def rates_by_length(estimates: Sequence[float], budget: Budget) -> list[float] | None:
    """(1 + S(n)) / r(n + 1) for n = 1..len(estimates) (`best_length`); None before K = auto
    has measured a pass."""
    if budget.row_cost(2) is None:
        return None
    rates, score = [], 0.0
    for n, estimate in enumerate(estimates, start=1):
        score += estimate
        rows = budget.row_cost(n + 1)
        rates.append((1.0 + score) / rows if rows else 0.0)
    return rates


def measured_length(estimates: Sequence[float], budget: Budget, n: int) -> int:
    """`n`, or the length K = auto asks to have its pass size measured (`Budget.measure_rows`)
    when the prices it has put that length within `MEASURE_LOSS` of `n`'s rate: a pass of a size
    not measured yet costs at most that share of one cycle's speed, and only now and then."""
    if n <= 0:
        return n
    rows = budget.measure_rows(len(estimates) + 1)
    if rows is None or not 2 <= rows <= len(estimates) + 1 or rows == n + 1:
        return n
    rates = rates_by_length(estimates, budget)
    if rates is None:
        return n
    return rows - 1 if rates[rows - 2] >= (1.0 - MEASURE_LOSS) * rates[n - 1] else n


def min_score(budget: Budget, rows: int, fallback: str, k: int) -> float:
    """The expected accepted tokens a proposal of `rows - 1` tokens must promise to pay off.

    `fallback` names the drafter that proposes when this one does not ("" when alone); `k` is
    the most this lookup may propose this cycle. K = auto's figures come from `budget`
    (`Budget.row_cost`, `Budget.best_speedup`); a fixed K has none.
    """
    extra_rows = budget.row_cost(rows)
    if fallback:
        speedup = budget.best_speedup(fallback) if extra_rows is not None else None
        if extra_rows is None or speedup is None:
            return min(CHAINED_MIN_SCORE, CHAINED_MIN_FRACTION * k)
        return max(speedup, 1.0) * extra_rows - 1.0
    return ALONE_MIN_SCORE if extra_rows is None else extra_rows - 1.0
