"""K = auto: each cycle's draft length, per drafter, from measured acceptance and measured costs.

For a drafter s, let a_i be the chance that its i-th proposed token is accepted given that the ones
before it were (measured per position: a lookup's confidence falls off differently from a draft
model's). A cycle that proposes k tokens yields on average

    E(k) = 1 + a_1 + a_1·a_2 + … + a_1·…·a_k        tokens (the target always adds one)

and costs c_s(k) + v(k + 1) seconds: the drafter's cost, learned as c_call + c_unit·k from the time
each call took against the work it did (forward passes; 0 for a free lookup), plus the target's
verify pass over k + 1 rows. The speed-up over plain decoding is E(k)·v(1) / (c_s(k) + v(k + 1));
we take the k that maximizes it, and k = 0 when none beats 1. While a drafter sits at k = 0 a cheap
probe keeps its estimate fresh (after 8 cycles, then twice as long after each, up to 64), so
speculation comes back when the text turns predictable again. Each drafter has its own figures,
so a combination (a lookup, then a draft model) is priced member by member.

The model predicts; the guard (pays.py) checks: a drafter whose recent cycles ran slower, in
tokens per wall second, than the recent plain cycles is held at K = 0 whatever the model says,
and tried again now and then. Either way, `holding` says why (`events.HoldBack`).

v(n) is a table per batch size, not a fitted line: llama.cpp's CPU kernels are not even monotonic
in n (on the demo pair a 2-row pass took longer than a 4-row one). Each size keeps the median of
its last few passes, so one slow pass (the first of a new batch shape re-plans llama.cpp's graph)
does not price that size out for good, and a size not verified for `STALE_PASSES` passes leaves
the table (one early pass, on a quieter machine, priced 3 rows like 1 for a whole run). Sizes
not in it are interpolated from their measured neighbours. What one more row costs a plan's
tokens after its first (and a tree's candidates) is the mean extra row between 2 and k + 1 rows
on that table (`row_seconds`): consistent with the k it was priced from, and blind to the first
extra row, which on a CPU may cost several later ones. The table does not depend on the
temperature, so greedy and sampled replies share it.

Acceptance is remembered over about the last 30 judged positions (costs over the last 10): at
T > 0 each judgement is a coin flip, and a short memory let a few unlucky flips drop k to 0.

At T = 0 a draft also stops early when it is unsure: one more token pays only if its chance of
acceptance beats its cost in units of a plain target step, c_unit / v(1). The draft's own top
probability stands in for that chance, scaled by a running calibration (accepted tokens / summed
confidence of the tokens the target judged). A drafter that reads its own q may also ask for a
`plan` (draftplan.py): this cycle's speed-up and measured costs as thresholds, and a calibration
of its confidence into chances of acceptance, so that when sampling it prices every token as it
draws it, and adds candidates beside a token (a token tree) wherever they pay for their rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from spectui.engine.events import HoldBack, HoldWhy
from spectui.engine.planning.figures import PROBE_EVERY, STEADY_CATCH_UP, DrafterFigures
from spectui.engine.planning.passcosts import VerifyCosts
from spectui.engine.planning.pays import LAST_PROBE, RELEASE_PROBES, PaysGuard, ProbeBudget, Rate
from spectui.engine.step.drafter import BudgetDefaults
from spectui.engine.step.draftplan import DraftPlan
from spectui.limits import MAX_DRAFT, MAX_LOOKUP_DRAFT

if TYPE_CHECKING:
    from spectui.engine.step.speculative import StepResult

PROBE_K = 2
FIRST_GUESS_K = 4  # before anything is measured
DEFAULT_P_MIN = 0.5  # before any cost is measured
GROWTH = 2  # K = auto drafts at most this many times the longest draft it has measured
BREAKEVEN_EVERY = 64  # asks while held between two searches for the break-even acceptance (shown only)
REPRICE_EVERY = 8  # asks while held between two pricings of its k (when its own figures did not move)
MEASURE_EVERY = 4  # lookup proposals between two passes of a size K = auto asks to have measured
AWAKE_EVERY = 4
"""While every drafter of a reply is held and nothing about them is due, one cycle in this many
still asks them (a held lookup looks up then, to be judged: `lookup_base.SHADOW_EVERY`); the
others rest (`AutoDraft.rests`)."""


class AutoDraft(BudgetDefaults):
    """Online estimates per drafter and for the target's verify pass; a `Budget` for the step."""

    def __init__(self, max_k: int = MAX_DRAFT, verify: VerifyCosts | None = None, max_leaves: int = 1,
                 plain: Rate | None = None) -> None:
        self.max_k = max_k
        """The longest K it picks for a drafter from its averages (`k`)."""
        self.figures: dict[str, DrafterFigures] = {}
        self.verify = verify if verify is not None else VerifyCosts()
        """The target's pass costs (shared by the generator's greedy and sampled figures)."""
        self.max_leaves = max_leaves
        """Branches a tree may have on this target (1: chains only; see tree_cache.py)."""
        self.planning = True
        """Offer drafters that price their own tokens a `plan` (False: K = auto's k alone)."""
        self.trees = True
        """Let plans add candidates beside the first choice where they pay (False: chains)."""
        self.guard = PaysGuard(plain if plain is not None else Rate())
        """What speculation realised against plain decoding (`plain`: shared with the other
        temperature's figures, as the target's pass costs are)."""
        self.holds: dict[str, HoldBack] = {}
        """The drafters held at K = 0 as of the last time each asked, and why."""
        self.probes = ProbeBudget()
        """What held drafters' probes cost, against the time: a probe waits until it is in budget."""
        self._holding_asks = 0
        self._measure_in = MEASURE_EVERY
        self._awake_in = 0

    def of(self, source: str) -> DrafterFigures:
        return self.figures.setdefault(source, DrafterFigures())

    def observe(self, step: StepResult) -> None:
        """Record a cycle: the verify pass always, the drafter's figures when one ran."""
        self.verify.add(step.drafted + 1, step.verify_seconds)
        if step.proposal.source:
            self.of(step.proposal.source).observe(step)

    def observe_cycle(self, step: StepResult, seconds: float, auto: bool = True) -> None:
        """A whole cycle's wall `seconds` (the loop's own work included), for the guard: a plain
        step, or the realised speed of the drafter that worked in it. A draft that first caught up
        on a lookup's run counts (the chain pays for it whenever the lookup proposed: on the demo
        pair at T = 0.8 leaving those cycles out showed the draft at 1.00x while the replies ran
        at 0.91x); the first cycle of a probe, which catches up on a whole hold, does not.
        `auto`: a cycle of a K = auto reply (else a plain step of a reply at K = 0, which teaches
        the plain speed but is not time the probe budget is a share of)."""
        proposal = step.proposal
        probe = self.probing(proposal.source)
        if auto:
            self.probes.add(seconds, len(step.tokens), self.guard.plain.tps, probe)
        self.guard.tick(self.probes.allows())
        if proposal.caught_up > STEADY_CATCH_UP and probe:
            return  # the probe goes on one more cycle, and that one is measured
        self.guard.observe(proposal.source, proposal.work > 0 or bool(proposal.tokens), len(step.tokens), seconds)

    def new_reply(self) -> None:
        """A reply starts: probe each held drafter on its first cycle, when probes are in budget.
        It is the cheapest probe there is and the likeliest to find a change: the text is new
        (a hold made on a poem kept a draft that pays on code at K = 0 for the next replies: issue
        #35's sweep, the costly draft at T 1.0 held through prompts where it ran 1.1-1.37x), and
        a draft model has just read the prompt, so it drafts at once instead of first reading what
        it missed (90-110 ms on the demo's draft, against 25-30 ms for the probe itself).
        Without a probe, a held draft model leaves the prompt unread (`stays_held`)."""
        for figures in self.figures.values():
            # they said what the last reply's last cycle did: this reply's first is yet to be asked
            figures.probing = figures.returning = False
        if not self.holds or not self.probes.allows():
            return
        self.guard.probe_all()
        for source in self.holds:
            figures = self.of(source)
            figures.idle_cycles = figures.probe_every  # K = auto's own hold probes on its next ask

    def plain_due(self) -> bool:
        """Whether the next cycle should be a plain step, to keep the guard's baseline fresh."""
        return self.guard.plain_due()

    def rests(self, sources: Sequence[str]) -> bool:
        """Whether this cycle may be a plain step that asks drafters `sources` nothing: each is
        held and its ask would hold it again with nothing to learn (no probe, no release, no
        pricing due), and it is not one of the cycles kept awake (`AWAKE_EVERY`). A held cycle's
        asks were most of what it cost over a plain one (issue #35: ~0.2 ms of a ~0.25 ms
        surplus, ~1 % of a 20 ms CPU pass, ~4 % of a 5-6 ms GPU pass). A hold that counts its
        asks (a draft no K pays for waits `probe_every` of them for its probe) counts a rested
        cycle as one, so probes and pricing come at the same cycles as when it is asked."""
        self._awake_in -= 1
        if self._awake_in <= 0 or not sources or not all(self.stays_held(s) for s in sources):
            self._awake_in = AWAKE_EVERY
            return False
        for source in sources:
            figures = self.figures[source]
            if figures.priced:  # it asks `k`, which counts down to its next pricing
                figures.reprice_in -= 1
            if self.holds[source].why == "cost":
                figures.idle_cycles += 1
        self._holding_asks += len(sources)
        return True

    def stays_held(self, source: str) -> bool:
        """Whether `source`'s ask this cycle would hold it at K = 0 and change nothing but the
        counters `rests` advances (`k` and `limit`, read for what they would do)."""
        held = self.holds.get(source)
        hold = self.guard.holds.get(source)
        figures = self.figures.get(source)
        if held is None or figures is None or figures.probing or figures.probe_again:
            return False
        if hold is not None and (hold.probing or hold.paid >= RELEASE_PROBES):
            return False  # a probe, or a release, is due
        if figures.priced and not (figures.priced == figures.evidence and figures.reprice_in > 0):
            return False  # `k` would price it again now
        if held.why == "slower":
            return hold is not None
        return (figures.measured and bool(self.verify) and bool(figures.priced) and figures.last_k == 0
                and not (figures.idle_cycles + 1 >= figures.probe_every and self.probes.allows()))

    def holding(self, sources: Iterable[str]) -> HoldBack | None:
        """Why a drafter asked this cycle (`sources`) is held, or None; a draft model's reason
        before a lookup's (it says what a draft costs)."""
        held = [self.holds[s] for s in sources if s in self.holds]
        return next((h for h in held if h.draft_cost is not None), held[0] if held else None)

    # ----- the Budget protocol --------------------------------------------------------------

    def k(self, source: str) -> int:
        figures = self.of(source)
        k = self._ask(source, figures)
        figures.kept_up = k > 0
        return k

    def _ask(self, source: str, figures: DrafterFigures) -> int:
        figures.probing = figures.returning = False
        if not figures.measured or not self.verify:
            figures.last_k = 0  # no plan: nothing to price it with
            return FIRST_GUESS_K
        best_k = figures.last_k = self._best_k(source, figures)
        if figures.probe_again:
            figures.probe_again, figures.probing = False, True
            return PROBE_K
        if best_k > 0:
            if self.guard.decide(source):
                self._hold(source, "slower")
                return 0
            returning = self._priced_back(source)
            if not returning or self.probes.allows():
                figures.returning = returning
                figures.idle_cycles, figures.probe_every = 0, PROBE_EVERY
                self.holds.pop(source, None)
                return best_k
            figures.last_k = 0  # its return waits for the probe budget: held for its cost, priced again then
        self._hold(source, "cost")
        figures.idle_cycles += 1
        if figures.idle_cycles >= figures.probe_every and self.probes.allows():
            figures.idle_cycles, figures.probe_every = 0, min(2 * figures.probe_every, LAST_PROBE)
            figures.probing = True
            figures.cost_stale = True  # costs measured before the hold may be stale: measure anew
            return PROBE_K
        return 0

    def _priced_back(self, source: str) -> bool:
        """Whether `source`, held for its cost, is priced back to drafting by its figures alone
        (no probe paid: the target's passes got cheaper, or noise moved them). Its first cycle
        reads what it missed in the hold, a probe's cost (issue #35: a 25-token catch-up, 105 ms
        against a 25 ms plain step, on the weak pair at T 1.0): the probe budget pays for it."""
        held = self.holds.get(source)
        return held is not None and held.why == "cost" and not self.of(source).kept_up

    def _best_k(self, source: str, figures: DrafterFigures) -> int:
        """The k with the best `expected_speedup` above 1.0 (0: none pays). A held drafter's is
        worked out again only when its own figures moved or every `REPRICE_EVERY` asks: held, only
        the verify costs move (a plain pass each cycle), and pricing every k was K = auto's
        dearest work in a held cycle (~60 us of ~0.4 ms on the weak pair, issue #35)."""
        seen = figures.evidence
        if source in self.holds and figures.priced == seen and figures.reprice_in > 0:
            figures.reprice_in -= 1
            return figures.last_k
        figures.priced, figures.reprice_in = seen, REPRICE_EVERY - 1
        best_k, best_gain = 0, 1.0
        for k, gain in enumerate(self.speedups(source, min(self.max_k, GROWTH * max(figures.longest, PROBE_K))), 1):
            if gain > best_gain:
                best_k, best_gain = k, gain
        return best_k

    def _hold(self, source: str, why: HoldWhy) -> None:
        """Note that `source` is held at K = 0 and why; the break-even acceptance is worked out
        again only when the reason changes or every `BREAKEVEN_EVERY` asks (it takes a search)."""
        figures = self.of(source)
        held = self.holds.get(source)
        self._holding_asks += 1
        seen = (why, figures.evidence, self.guard.realised_weight(source))
        if held is not None and figures.said == seen and self._holding_asks % BREAKEVEN_EVERY:
            return  # nothing it shows has moved since it was last said (refreshed now and then)
        figures.said = seen
        if not self.verify or not figures.measured:
            breakeven = None  # nothing to work it out from yet
        elif held is None or held.why != why or self._holding_asks % BREAKEVEN_EVERY == 0:
            breakeven = self.breakeven(source)
        else:
            breakeven = held.breakeven
        unit = self.verify_cost(1) if self.verify else 0.0
        cost = figures.draft_cost(1) / unit if unit > 0 and figures.cost.x > 0 else None
        self.holds[source] = HoldBack(source, why, cost, figures.acceptance, breakeven, self.guard.ratio(source))

    def plan(self, source: str) -> DraftPlan | None:
        """For a drafter that prices each token by its own confidence (draftplan.py), asked after
        `k` in the same cycle: thresholds from this cycle's speed-up at k and the measured costs
        of a draft pass and of a verify row. None before anything is measured, or on a probe."""
        figures = self.of(source)
        if not self.planning or figures.probing or figures.last_k <= 0 or not self.verify:
            return None
        k = figures.last_k
        unit = self.verify_cost(1)
        speedup = max(self.expected_speedup(source, k), 1.0)
        row = self.row_seconds(k)
        c_unit = figures.cost.coefficients()[1]
        return DraftPlan(max_tokens=self.max_k, row_value=speedup * row / unit,
                         draft_value=speedup * (c_unit + row) / unit, mean_acceptance=figures.acceptance,
                         max_nodes=MAX_LOOKUP_DRAFT, max_leaves=self.max_leaves if self.trees else 1,
                         calibration=figures.by_confidence)

    def probing(self, source: str) -> bool:
        """This cycle probes `source` (held at K = 0 by the model or by the guard)."""
        hold = self.guard.holds.get(source)
        figures = self.figures.get(source)
        return (hold is not None and hold.probing) or (figures is not None and (figures.probing or figures.returning))

    def limit(self, source: str) -> int:
        """K = auto's ceiling for a lookup, which weighs each proposal against its verify rows
        itself (only lookups ask): no forward pass per token, so past `max_k`; 0 while the guard
        holds it (the cycles it proposed in ran slower than plain ones)."""
        if self.guard.decide(source):
            self._hold(source, "slower")
            return 0
        self.holds.pop(source, None)
        return MAX_LOOKUP_DRAFT

    def p_min(self, source: str) -> float:
        """Stop a draft when its calibrated confidence falls below the cost of one more token.

        A probe drafts its tokens whatever the confidence: it is there to measure acceptance."""
        figures = self.of(source)
        if figures.probing:
            return 0.0
        if not figures.measured or not self.verify:
            return DEFAULT_P_MIN
        unit_cost = figures.cost.coefficients()[1] / self.verify_cost(1)
        return min(max(unit_cost / max(figures.calibration, 1e-3), 0.02), 0.95)

    def row_cost(self, rows: int) -> float | None:
        """A verify pass over `rows` rows, in plain one-row passes; None before one is measured."""
        try:
            return self.verify_cost(rows) / self.verify_cost(1)
        except (ValueError, ZeroDivisionError):  # nothing measured yet
            return None

    def best_speedup(self, source: str) -> float | None:
        """The best `expected_speedup` of `source` at any K up to `max_k`; None before it is measured."""
        if not self.of(source).measured:
            return None
        if source in self.holds:
            return 1.0  # held at K = 0: what runs instead is a plain step
        return max(self.speedups(source, self.max_k))

    def measure_rows(self, longest: int) -> int | None:
        """Every `MEASURE_EVERY`th lookup proposal, a size between two measured ones that are far
        apart (`VerifyCosts.unmeasured`), until the sizes up to `longest` are known."""
        self._measure_in -= 1
        if self._measure_in > 0 or not self.verify:
            return None
        rows = self.verify.unmeasured(longest)
        if rows is not None:
            self._measure_in = MEASURE_EVERY
        return rows

    def breakeven(self, source: str) -> float | None:
        """The acceptance (the same at every position) above which `source` would pay with its
        measured costs at its best K; None when it would not pay even at 100 %."""
        figures, unit = self.of(source), self.verify_cost(1)

        def best(rate: float) -> float:
            return max((1 - rate ** (k + 1)) / (1 - rate) * unit / (figures.draft_cost(k) + self.verify_cost(k + 1))
                       for k in range(1, self.max_k + 1))

        low, high = 0.0, 0.999
        if best(high) <= 1.0:
            return None
        for _ in range(16):
            middle = (low + high) / 2
            low, high = (middle, high) if best(middle) <= 1.0 else (low, middle)
        return high

    def row_seconds(self, k: int) -> float:
        """What one more verify row costs a plan's tokens after its first, `k` being K = auto's
        k: the mean extra row from 2 rows to k + 1 on the table that k was priced from. The first
        token's row is paid for by k > 0, and may cost far more than the ones after it: the wide
        pair's F16 target on this CPU took 1.6x a one-row pass for 2 rows, ~0.16x more for each
        row up to 8. A line fitted to the recent passes, most of them 1 and 2 rows once a plan
        drafted one token, priced every row at that first one's cost, and the plan went on
        drafting one token a cycle (issue #35, tenth session: 1.3x at T 0.8, and 1.8x once it
        drafted ~5 tokens a pass). With k < 3: the fitted slope, else the mean extra row up to
        k + 1 rows."""
        if k >= 3:
            return max((self.verify_cost(k + 1) - self.verify_cost(2)) / (k - 1), 0.0)
        fitted = self.verify.row_seconds()
        if fitted is not None:
            return max(fitted, 0.0)
        return max((self.verify_cost(k + 1) - self.verify_cost(1)) / k, 0.0)

    # ----- the model ------------------------------------------------------------------------

    def expected_speedup(self, source: str, k: int) -> float:
        """E(k)·v(1) / (c(k) + v(k + 1)) for a proposal of k >= 1 tokens (the module's docstring)."""
        return self.speedups(source, k)[-1]

    def speedups(self, source: str, longest: int) -> list[float]:
        """`expected_speedup` at k = 1..longest, E(k) summed once over the positions."""
        figures, unit = self.of(source), self.verify_cost(1)
        gains, expected, alive = [], 1.0, 1.0
        for k, rate in enumerate(figures.position_acceptances(longest), start=1):
            alive *= rate
            expected += alive
            cost = figures.draft_cost(k) + self.verify_cost(k + 1)
            gains.append(expected * unit / cost if cost > 0 else 0.0)
        return gains

    def verify_cost(self, rows: int) -> float:
        """Seconds of a target pass over `rows` rows: measured, else from measured neighbours."""
        return self.verify.seconds(rows)
