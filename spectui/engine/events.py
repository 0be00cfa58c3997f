"""What the generator yields: text pieces, per-cycle stats, and a final summary."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from spectui.engine.llama.hostcost import HostCost
from spectui.errors import SpectuiError
from spectui.limits import MAX_LOOKUP_DRAFT

StopReason = Literal["eos", "stop", "length", "context", "cancelled", "worker", "file"]
"""Why a reply ended. The last three are faults (`spectui.faults` names each in one line):
`context` the context filled up, `worker` an RPC worker stopped answering, `file` a model file was
truncated or rewritten on disk while loaded. The reply up to the fault is kept. The others: eos the
model's end token; stop a stop string (or a grammar with no way on); length max_tokens;
cancelled asked to stop."""
FAULT_REASONS: frozenset[str] = frozenset({"context", "worker", "file"})


TARGET = "target"
"""The origin of a token the target produced itself (not an accepted proposal)."""


@dataclass(frozen=True)
class TextPiece:
    """Decoded text of one or more tokens, never splitting a UTF-8 character."""

    text: str
    origin: str = TARGET
    """`target`, or the drafter whose proposal the target accepted (`model`, `ngram`, …)."""

    @property
    def from_draft(self) -> bool:
        return self.origin != TARGET


HoldWhy = Literal["cost", "slower"]
"""Why K = auto holds a drafter at K = 0: `cost`, its measured costs and acceptance promise no
gain; `slower`, the cycles in which it drafted ran slower than plain ones (`engine.planning.pays`)."""


@dataclass(frozen=True)
class HoldBack:
    """K = auto holds a drafter at K = 0 because speculating would make the reply slower: which,
    why, and the figures that say so (the panel, bench and serve show `describe()`)."""

    source: str
    """The drafter held (`model`, `suffix`, …)."""
    why: HoldWhy
    draft_cost: float | None
    """Seconds of one drafted token over a one-row target pass (0.63: 63 %); None for a drafter
    that runs no forward pass (a lookup), or before it is measured."""
    acceptance: float
    """Its recent acceptance (accepted / judged drafted tokens)."""
    breakeven: float | None
    """The acceptance above which it would pay with these costs; None: not even at 100 %."""
    realised: float | None = None
    """Its recent cycles' speed over the plain cycles' (0.82: 0.82x); None: not measured."""

    def describe(self) -> str:
        """E.g. "this draft costs 63 % of a target pass: it pays only above ~90 % acceptance
        (now 68 %); holding at K = 0"."""
        who = "this draft" if self.source == "model" else f"the {self.source} drafter"
        cost = (f"{who} costs {_percent(self.draft_cost)} of a target pass" if self.draft_cost is not None
                else f"{who} runs no forward pass")
        now = f"{_percent(self.acceptance)} accepted"
        if self.why == "slower" and self.realised is not None:
            if self.realised >= 1.0:  # held, and its probes gain too little to be let go
                return (f"speculation ran at only {self.realised:.2f}x speculation off ({cost}, {now}): "
                        "holding at K = 0 until it clearly pays, trying again now and then")
            return (f"speculation ran at {self.realised:.2f}x speculation off ({cost}, {now}): "
                    "holding at K = 0, trying again now and then")
        if self.breakeven is not None and self.acceptance >= self.breakeven:
            # priced back to drafting, its return waiting for a try (`AutoDraft._priced_back`)
            return f"{cost} ({now}): it should pay again; holding at K = 0 until its next try"
        pays = ("it cannot pay here even at 100 % acceptance" if self.breakeven is None
                else f"it pays only above ~{_percent(self.breakeven)} acceptance")
        return f"{cost}: {pays} (now {now}); holding at K = 0"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


@dataclass(frozen=True)
class CycleStats:
    """One draft-then-verify cycle (or one plain target step when K = 0)."""

    k: int
    """Tokens the drafter that proposed was allowed this cycle (0 when speculation is off)."""
    drafted: int
    """Tokens actually proposed (a drafter may stop early when unsure, or find no match)."""
    accepted: int
    """Proposed tokens the target accepted."""
    emitted: int
    """Tokens this cycle added to the reply (accepted + the target's own token)."""
    seconds: float
    source: str = ""
    """The drafter that proposed (`model`, `ngram`, …); empty when none did."""
    probe: bool = False
    """A baseline probe: decoded with speculation off and timed apart (see GenerationConfig)."""
    host: HostCost = field(default_factory=HostCost)
    """Its time outside llama.cpp's compute calls, by part (`spectui.engine.llama.hostcost`)."""
    branches: int = 1
    """Leaves of the proposal: 1 for a chain, more for a token tree (`drafted` is its nodes)."""
    held: HoldBack | None = None
    """K = auto held a drafter at K = 0 this cycle, and why (None: nothing held)."""
    draft_seconds: float = 0.0
    """Of `seconds`, the drafters' (the rest is the target's pass and the step's decisions)."""


@dataclass
class SourceTotals:
    """Proposals of one drafter over a reply."""

    proposed: int = 0
    accepted: int = 0
    cycles: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


@dataclass
class GenerationStats:
    """Running totals for one reply; `Finished` carries the final copy."""

    prompt_tokens: int = 0
    """Prompt tokens actually decoded (a reused KV-cache prefix is not counted)."""
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    """Every token of the reply; the first comes out of the prompt pass."""
    decode_tokens: int = 0
    """Tokens produced by decode cycles (all but the first)."""
    decode_seconds: float = 0.0
    probe_tokens: int = 0
    """Tokens of the baseline probe at the start of the reply (not in the decode figures)."""
    probe_seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    accept_histogram: list[int] = field(default_factory=lambda: [0] * (MAX_LOOKUP_DRAFT + 1))
    """accept_histogram[n] counts cycles in which n drafted tokens were accepted."""
    by_source: dict[str, SourceTotals] = field(default_factory=dict)
    """Proposed / accepted per drafter (a combination has one entry per member)."""
    tree_cycles: int = 0
    """Cycles whose proposal was a token tree (several candidates for some position)."""
    tree_nodes: int = 0
    """Tokens proposed in those cycles (their trees' nodes)."""
    tree_accepted: int = 0
    """Tokens accepted in those cycles (one path: at most one candidate per position)."""
    tree_branches: int = 0
    """Leaves of those trees."""
    largest_tree: int = 0
    """The most nodes one tree had."""
    round_trips: int = 0
    """Network round trips to RPC workers during the reply (0 when the target is local)."""
    network_wait_seconds: float = 0.0
    """Time spent waiting on RPC workers' answers during the reply."""
    host: HostCost = field(default_factory=HostCost)
    """Decode cycles' time outside llama.cpp's compute calls, by part (probe cycles apart)."""
    held_cycles: int = 0
    """Decode cycles in which K = auto held a drafter at K = 0 (it would have made them slower)."""
    held: HoldBack | None = None
    """Why, as of the last cycle that held one (None: K = auto never held back in this reply)."""

    def add_cycle(self, cycle: CycleStats) -> None:
        self.generated_tokens += cycle.emitted
        if cycle.probe:
            self.probe_tokens += cycle.emitted
            self.probe_seconds += cycle.seconds
            return
        self.decode_tokens += cycle.emitted
        self.decode_seconds += cycle.seconds
        self.host += cycle.host
        if cycle.held is not None:
            self.held_cycles += 1
            self.held = cycle.held
        self.drafted += cycle.drafted
        self.accepted += cycle.accepted
        self.target_passes += 1
        if cycle.branches > 1:
            self.tree_cycles += 1
            self.tree_nodes += cycle.drafted
            self.tree_accepted += cycle.accepted
            self.tree_branches += cycle.branches
            self.largest_tree = max(self.largest_tree, cycle.drafted)
        if cycle.drafted:
            self.accept_histogram[min(cycle.accepted, MAX_LOOKUP_DRAFT)] += 1
            totals = self.by_source.setdefault(cycle.source, SourceTotals())
            totals.proposed += cycle.drafted
            totals.accepted += cycle.accepted
            totals.cycles += 1

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted over the reply (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def chain_drafted(self) -> int:
        """Tokens proposed in the cycles that verified a chain (not a tree)."""
        return self.drafted - self.tree_nodes

    @property
    def chain_acceptance_rate(self) -> float:
        """accepted / drafted over the chain cycles only. A tree's nodes include the alternatives
        for one position, of which at most one can be accepted, so its share of accepted nodes is
        low by construction, however well the draft guesses: not a sign that the draft misses."""
        drafted = self.chain_drafted
        return (self.accepted - self.tree_accepted) / drafted if drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens produced per target forward pass (1.0 without speculation)."""
        return self.decode_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def mean_tree(self) -> tuple[float, float]:
        """Nodes and branches of the average tree (0, 0 when every proposal was a chain)."""
        if not self.tree_cycles:
            return 0.0, 0.0
        return self.tree_nodes / self.tree_cycles, self.tree_branches / self.tree_cycles

    @property
    def decode_tps(self) -> float:
        """Decoding speed: tokens after the first per second (the prompt pass is separate)."""
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def round_trips_per_token(self) -> float:
        return self.round_trips / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def probe_tps(self) -> float:
        """Speed of the baseline probe: the target alone, measured just now."""
        return self.probe_tokens / self.probe_seconds if self.probe_seconds > 0 else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    def snapshot(self) -> GenerationStats:
        return replace(self, accept_histogram=list(self.accept_histogram),
                       by_source={k: replace(v) for k, v in self.by_source.items()})


@dataclass(frozen=True)
class Progress:
    """Emitted after every cycle: that cycle and a snapshot of the totals so far."""

    cycle: CycleStats
    totals: GenerationStats


@dataclass(frozen=True)
class TokenLogprob:
    """One emitted token's log-probability under the target (softmax of its raw logits, whatever
    the drafter proposed), and the most likely tokens at that position with theirs."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class TokenLogprobs:
    """The log-probabilities of the tokens a cycle added to the reply (when asked for), in order."""

    entries: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Finished:
    """The last event of a generation."""

    reason: StopReason
    stats: GenerationStats
    tokens: tuple[int, ...]
    text: str
    message: str = ""
    """For a fault (reason `context`, `worker`, `file`): what happened and what to do."""
    error: SpectuiError | None = None
    """For a fault: the error that ended the reply (`spectui.faults.of_finished` reads it)."""

    @property
    def fault(self) -> bool:
        """The reply was cut by a fault, not ended by the model, a limit or the user."""
        return self.reason in FAULT_REASONS


Event = TextPiece | Progress | TokenLogprobs | Finished
