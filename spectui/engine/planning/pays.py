"""Does speculation pay, as realised? K = auto's guard against making a reply slower.

K = auto's model (autodraft.py) predicts a drafter's speed-up from its measured acceptance and
costs. A prediction can be wrong in ways the model does not see: a drafter that stops early when
unsure still pays for the pass that told it so, trees verify more rows than the chain K priced,
the host's work per cycle, a machine that got busier. So the guard also measures what
speculation *did*: tokens per wall second over the recent cycles in which a drafter worked,
against the recent plain cycles (one target pass, one token: what speculation off runs). A
drafter whose cycles ran slower than plain ones is held at K = 0.

Holding back is never final: a held drafter is tried again now and then (a probe cycle: after
`FIRST_PROBE` cycles, then twice as long after each probe that ran slower, up to `LAST_PROBE`;
at once after one that paid), at once when the plain speed moved by more than `CHANGED`
since the hold began (the machine's load changed: what was measured no longer holds), and on the
first cycle of a reply (`probe_all`: new text, and a draft model has just read the prompt). It drafts
again once `RELEASE_PROBES` probes in a row paid.
While speculating, a plain cycle now and then (`PLAIN_EVERY`) keeps the comparison's other side
fresh, so a baseline measured on a quiet (or busy) moment cannot decide for the whole run.

A probe is not free: a draft model held for a while must first read every token it missed, then
draft, then the target verifies. On a draft that cannot pay (too weak, or too costly) those probes
were what was left of the loss (issue #35's sweep: 0.94-0.95x at T 0.8 and 1.0 with a draft held
in 94 % of passes). So probes are paid out of `PROBE_SHARE` of the decode time (`ProbeBudget`:
what each cost over what plain steps would have taken for its tokens): a costly probe of a
hopeless draft comes rarely, a cheap one (a free lookup's rows) as often as before.

Both rates are exponentially weighted over about the last seven cycles of each kind (`DECAY`), so
they follow the text (a loop the lookups predict, then prose) and the machine as they change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DECAY = 0.85
"""Weight of history in each rate: about the last seven cycles. A drafter's cycles vary a lot
(one token, or a whole accepted draft): a shorter memory held back a draft that pays on
average after three unlucky cycles."""
MIN_WEIGHT = 4.0
"""A rate counts once this much (decayed) weight of cycles is behind it: five cycles."""
HOLD_BELOW = 1.0
"""A drafter whose cycles ran below this fraction of the plain speed is held at K = 0."""
RELEASE_ABOVE = 1.1
"""A probe pays when its cycle ran this much faster than plain ones. Above HOLD_BELOW on purpose: a
drafter near break-even whose rate, noisy over a few cycles (more so when sampling), crossed 1.0
by luck was let go and ran a stretch of slower cycles before it was held again. What it gives up:
a drafter that pays under 10 % (docs/BENCHMARKS.md, "never slower": scripted pairs with a busy
machine's noise, with and without it)."""
RELEASE_PROBES = 2
"""Probes in a row that must pay before a held drafter drafts again (after one that paid, the next
comes at once). One was not enough: a too-weak draft (15-35 % accepted) whose probe happened to
have its two tokens accepted ran at ~2x for that cycle, was let go, and lost a few cycles before
the guard held it again (issue #35's quiet sweep: 0.93x on that pair at T 0); two such probes in a
row come about a tenth as often, and a drafter that really pays again loses one cycle."""
FIRST_PROBE = 8
LAST_PROBE = 64
"""Cycles at K = 0 between probes of a held drafter: from the first to the last, doubling."""
PLAIN_EVERY = 64
"""Speculative cycles between two plain ones while speculation pays."""
CHANGED = 0.4
"""The plain speed moved by more than this fraction since a hold began: probe now. A load that
doubles moves it by half; at 0.25 a busy machine's noise alone (its recent plain rate moving by a
quarter) set probes off every few dozen cycles, each a slower cycle."""
PROBE_SHARE = 0.01
"""Probes of held drafters may cost at most this share of the decode time (their wall
time over what plain steps would have taken for the tokens they gave). At 2 % the too-weak draft's
probes (~100 ms each: a 64-token catch-up on a draft 40-57 % of a target pass, then a steady
cycle) still took 4-5 % of 48-token replies at T 0.8 (issue #35's sweep, 2026-11-27: 0.92x)."""
BUDGET_DECAY = 0.998
"""Weight of history in the probe budget's window, per cycle: about the last 500 cycles count.
The budget was a decayed sum of the probes' overhead against this window, a probe let in
whenever the first was under `PROBE_SHARE` of the second: a probe that costs about the whole
allowance (the weak draft's: ~50 ms, 5 plain cycles, against 1 % of ~500 10-ms cycles) took it to
twice that, and the decay, proportional to what was spent, paid it back faster than the share:
~1.4 % of the time went to probes (issue #35, tenth session). What the bucket may save up is
this window's share, not a fixed number of seconds' (the first bucket's 10 s): so its decisions
depend on cycles, not on how long a pass takes (10 s is 1,000 of the demo's passes and 125 of the
wide pair's, whose one failed probe wastes ~100 ms)."""


@dataclass
class Rate:
    """Tokens per second over recent cycles, exponentially weighted."""

    tokens: float = 0.0
    seconds: float = 0.0
    weight: float = 0.0
    last: float = 0.0
    """The speed of the last cycle alone."""

    def add(self, tokens: int, seconds: float) -> None:
        if seconds <= 0:
            return
        self.tokens = DECAY * self.tokens + tokens
        self.seconds = DECAY * self.seconds + seconds
        self.weight = DECAY * self.weight + 1.0
        self.last = tokens / seconds

    @property
    def known(self) -> bool:
        return self.weight >= MIN_WEIGHT

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ProbeBudget:
    """What probes may cost beyond plain steps, paid out of a share of the decode time (a token
    bucket): each cycle banks `PROBE_SHARE` of its seconds, a probe's cycle takes what it cost over
    plain steps for its tokens, and a probe waits while the balance is below zero. Over any long
    stretch probes thus cost at most `PROBE_SHARE` of the time, plus what was saved up before it:
    at most the share of the recent time (`window`, about the last 500 cycles), so a long stretch
    without probes funds no burst, and a slow target's probes are let in at the same cycles as a
    fast one's that cost the same number of its passes."""

    balance: float = 0.0
    """Seconds of probe overhead in hand (negative: a probe's debt, repaid by the cycles after it)."""
    window: float = 0.0
    """The recent decode time, decayed by `BUDGET_DECAY` a cycle: what may be saved up is its share."""

    def add(self, seconds: float, tokens: int, plain_tps: float, probe: bool) -> None:
        """One cycle of `seconds` that gave `tokens`; `probe`: it was a held drafter's probe (what
        it took over plain steps for its tokens counts; a probe that ran faster counts 0)."""
        seconds = max(seconds, 0.0)
        self.window = BUDGET_DECAY * self.window + seconds
        self.balance = min(self.balance + PROBE_SHARE * seconds, PROBE_SHARE * self.window)
        if probe and plain_tps > 0:
            # a probe that ran faster than plain steps costs nothing, and refunds nothing: a
            # lookup's paying probes must not fund a hopeless draft's (issue #35, the weak pair
            # at T 0.8: a lookup's 11-token probe emptied the budget and the draft's probes then
            # took ~4 % of the time)
            self.balance -= max(0.0, seconds - tokens / plain_tps)

    def allows(self) -> bool:
        """Whether a probe may run now: nothing is owed for the ones before it."""
        return self.balance >= 0.0

    def refill(self) -> None:
        """Hold all that may be saved up (tests and scripts: probes are in budget)."""
        self.balance = PROBE_SHARE * self.window

    def spend_all(self) -> None:
        """Owe more than any run repays (tests and scripts: no probe from here on)."""
        self.balance = float("-inf")


@dataclass
class Hold:
    """A drafter the guard holds at K = 0."""

    plain_tps: float
    """The plain speed when the hold began (or was last confirmed)."""
    idle: int = 0
    """Cycles at K = 0 since the last probe."""
    wait: int = FIRST_PROBE
    """The wait after a probe that did not pay: doubling from FIRST_PROBE to LAST_PROBE."""
    paid: int = 0
    """Probes in a row that paid (RELEASE_PROBES of them let the drafter go)."""
    probing: bool = False
    """The current cycle is a probe of this drafter."""

    def start_probe(self, plain_tps: float) -> None:
        """This cycle probes the held drafter; `plain_tps`: the plain speed it is judged against."""
        self.idle, self.probing, self.plain_tps = 0, True, plain_tps

    @property
    def every(self) -> int:
        """Cycles at K = 0 before the next probe: 1 right after a probe that paid, else `wait`."""
        return 1 if self.paid else self.wait


@dataclass
class PaysGuard:
    """Realised speed per drafter against the plain speed; which drafters to hold at K = 0."""

    plain: Rate = field(default_factory=Rate)
    """Plain cycles (no drafter worked): the speculation-off speed as it is now."""
    realised: dict[str, Rate] = field(default_factory=dict)
    """Per drafter `source`: the cycles in which it worked (drafted, or ran a forward pass)."""
    holds: dict[str, Hold] = field(default_factory=dict)
    since_plain: int = 0
    """Speculative cycles since the last plain one."""

    def observe(self, source: str, worked: bool, tokens: int, seconds: float) -> None:
        """One cycle's tokens and wall seconds; `worked`: drafter `source` did something (else
        it was a plain step)."""
        if not worked:
            self.plain.add(tokens, seconds)
            self.since_plain = 0
            return
        self.since_plain += 1
        rate = self.realised.setdefault(source, Rate())
        rate.add(tokens, seconds)
        hold = self.holds.get(source)
        if hold is not None and hold.probing:
            hold.probing = False
            if self.plain.tps > 0 and rate.last >= RELEASE_ABOVE * self.plain.tps:
                hold.paid += 1
            else:
                hold.paid, hold.wait = 0, min(2 * hold.wait, LAST_PROBE)
            hold.plain_tps = self.plain.tps

    def realised_weight(self, source: str) -> float:
        """How much of drafter `source`'s cycles its realised rate holds: it moves only when the
        drafter works (a held one's stays put between probes)."""
        rate = self.realised.get(source)
        return rate.weight if rate is not None else 0.0

    def ratio(self, source: str) -> float | None:
        """The drafter's realised speed over the plain speed; None until both are measured."""
        rate = self.realised.get(source)
        if rate is None or not rate.known or not self.plain.known or self.plain.tps <= 0:
            return None
        return rate.tps / self.plain.tps

    def plain_due(self) -> bool:
        """Whether the next cycle should be plain: the plain speed is unknown while a drafter's is
        known, or it was last measured `PLAIN_EVERY` speculative cycles ago."""
        if self.since_plain >= PLAIN_EVERY:
            return True
        return not self.plain.known and any(rate.known for rate in self.realised.values())

    def probe_all(self) -> None:
        """Probe every held drafter on the next cycle (a reply starts: `AutoDraft.new_reply`)."""
        for hold in self.holds.values():
            if not hold.probing:
                hold.start_probe(self.plain.tps)

    def tick(self, probes_allowed: bool = True) -> None:
        """A cycle went by: each hold waits one more cycle for its probe, or probes now when the
        plain speed moved since it began; either only when `probes_allowed` (`ProbeBudget`)."""
        for hold in self.holds.values():
            if hold.probing:
                continue
            hold.idle += 1
            moved = hold.plain_tps > 0 and abs(self.plain.tps / hold.plain_tps - 1.0) > CHANGED
            if (hold.idle >= hold.every or moved) and probes_allowed:
                hold.start_probe(self.plain.tps)

    def decide(self, source: str) -> bool | None:
        """Whether to hold drafter `source` at K = 0 this cycle (the same answer however often a
        cycle asks: a lookup is asked after every token a draft model behind it drafts): True to
        hold it, False to let it draft (a probe too), None while nothing is measured (let it)."""
        ratio = self.ratio(source)
        hold = self.holds.get(source)
        if hold is None:
            if ratio is None or ratio >= HOLD_BELOW:
                return None if ratio is None else False
            self.holds[source] = Hold(self.plain.tps)
            return True
        if hold.paid >= RELEASE_PROBES:
            del self.holds[source]  # its probes showed it pays again
            return False
        return not hold.probing  # a probe goes on until it is measured
