"""A finished reply's figures: one typed value that every front end renders.

`ReplyFigures` is made once, by the reply core (`session.reply`), from the engine's final totals.
The chat app shows it under the reply (`meta_line`) and in the side-by-side verdict, the saved
chat keeps it (`stored()` / `from_stored()`, JSON in the store's `messages.stats`), `spectui
export` prints it, `spectui bench` adds replies' figures up, and `spectui serve` turns it into
OpenAI's `usage` and llama-server's `timings`.

Stored figures from older versions or damaged rows are read as far as they make sense (a missing
or wrong-typed field is its default), never as an error.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from spectui.engine.drafters.spec import DrafterInfo
from spectui.engine.events import GenerationStats
from spectui.engine.generation_config import AUTO, DraftControl, SamplingConfig

REASONS = {
    "cancelled": "stopped",
    "length": "cut at --max-tokens",
    "context": "context full",
    "worker": "cut: a worker was lost",
    "file": "cut: a model file changed on disk",
    "interrupted": "interrupted (saved as you quit)",
    "error": "failed",
}
"""How a reply's end is shown under it (a natural end says nothing)."""


@dataclass(frozen=True)
class DrafterFigures:
    """One drafter's proposals over a reply (a chain has one per member)."""

    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


@dataclass(frozen=True)
class ReplyFigures:
    """What one reply did and how fast: the panel's, the saved chat's, bench's and the API's."""

    reason: str
    """eos, stop, length, context, cancelled, worker, file (see `engine.events.StopReason`), error, or
    interrupted (saved as the app quit mid-reply)."""
    tokens: int = 0
    """Tokens of the reply, its thinking included (the API's `completion_tokens`)."""
    thinking_tokens: int = 0
    """Of those, the reasoning before the answer (its markers included)."""
    drafted: int = 0
    """Tokens drafters proposed."""
    accepted: int = 0
    """Proposed tokens the target accepted."""
    target_passes: int = 0
    """Target forward passes after the prompt's (one per cycle)."""
    mean_accepted: float = 0.0
    """Tokens per target pass (1.0 without speculation)."""
    tps: float = 0.0
    """Decoding speed: tokens after the first per second (the prompt is timed apart)."""
    k: str = ""
    """K as the user reads it: `5`, `auto (now 4)`, `0`, `off (…)`."""
    sampling: str = ""
    """How its tokens were chosen: `T=0 (greedy)`, or `T=0.8 top-p 0.95 top-k 40 min-p 0.05 ·
    seed 1234` (the seed drawn for it, so the reply can be drawn again)."""
    drafter: str = ""
    """The drafter kind that ran (`model+suffix`, …; empty when speculation was off)."""
    prompt_tokens: int = 0
    """The whole prompt (the API's `prompt_tokens`)."""
    prompt_cached: int = 0
    """Of those, tokens reused from the cache of an earlier reply (not decoded again)."""
    prompt_seconds: float = 0.0
    """Reading the prompt and choosing the first token: the time to first token."""
    decode_tokens: int = 0
    """Tokens after the first, made by decode cycles (a baseline probe's excluded)."""
    decode_seconds: float = 0.0
    by_drafter: dict[str, DrafterFigures] = field(default_factory=dict)
    """Proposed / accepted per drafter."""
    round_trips: int = 0
    """Network round trips to RPC workers (0 for a local target)."""
    network_wait_seconds: float = 0.0
    held_cycles: int = 0
    """Target passes in which K = auto held a drafter at K = 0 (drafting would have been slower)."""
    held_back: str = ""
    """Why, in one sentence (`engine.events.HoldBack.describe`); empty when it never held back."""

    # ----- derived ------------------------------------------------------------------------------

    @property
    def acceptance(self) -> float | None:
        """accepted / drafted; None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def prompt_decoded(self) -> int:
        """Prompt tokens actually read this reply (llama-server's `prompt_n`)."""
        return max(self.prompt_tokens - self.prompt_cached, 0)

    # ----- made from -------------------------------------------------------------------------

    @classmethod
    def of(cls, stats: GenerationStats, reason: str, *, k: str = "", drafter: str = "", prompt_tokens: int = 0,
           thinking_tokens: int = 0, sampling: str = "") -> ReplyFigures:
        """From the engine's final totals of a reply to a prompt of `prompt_tokens` tokens."""
        return cls(
            reason=reason, tokens=stats.generated_tokens, thinking_tokens=thinking_tokens,
            drafted=stats.drafted, accepted=stats.accepted, target_passes=stats.target_passes,
            mean_accepted=stats.mean_accepted, tps=stats.decode_tps, k=k, sampling=sampling,
            drafter=drafter, prompt_tokens=prompt_tokens,
            prompt_cached=max(prompt_tokens - stats.prompt_tokens, 0), prompt_seconds=stats.prompt_seconds,
            decode_tokens=stats.decode_tokens, decode_seconds=stats.decode_seconds,
            by_drafter={source: DrafterFigures(t.proposed, t.accepted) for source, t in stats.by_source.items()},
            round_trips=stats.round_trips, network_wait_seconds=stats.network_wait_seconds,
            held_cycles=stats.held_cycles, held_back=stats.held.describe() if stats.held is not None else "",
        )

    @classmethod
    def failed(cls) -> ReplyFigures:
        """A reply that ended in an error before it finished."""
        return cls(reason="error")

    # ----- stored ----------------------------------------------------------------------------

    def stored(self) -> dict[str, Any]:
        """What the chat store keeps (JSON); `acceptance` is written too, as rows written before
        the figures were typed held it (and an export in JSON shows it)."""
        data = asdict(self)
        data["acceptance"] = self.acceptance
        if not self.thinking_tokens:
            del data["thinking_tokens"]
        return data

    @classmethod
    def from_stored(cls, data: object) -> ReplyFigures | None:
        """Figures read back from the store; None when nothing usable was stored."""
        if not isinstance(data, dict) or not data:
            return None
        values: dict[str, Any] = {}
        for spec in fields(cls):
            value = data.get(spec.name)
            if spec.name == "by_drafter":
                values[spec.name] = _drafters(value)
            elif spec.type in ("int", "float") and (number := _number(value)) is not None:
                values[spec.name] = int(number) if spec.type == "int" else float(number)
            elif spec.type == "str" and isinstance(value, str):
                values[spec.name] = value
        values.setdefault("reason", "")
        acceptance = _number(data.get("acceptance"))
        if "accepted" not in values and acceptance is not None and values.get("drafted"):
            # a row written before the figures were typed held the rate, not the count
            values["accepted"] = round(acceptance * values["drafted"])
        return cls(**values)


def _number(value: object) -> int | float | None:
    """A stored number (an int stays one), or None when missing, not a number, or not finite."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


def _drafters(value: object) -> dict[str, DrafterFigures]:
    if not isinstance(value, dict):
        return {}
    out = {}
    for source, entry in value.items():
        if isinstance(source, str) and isinstance(entry, dict):
            proposed, accepted = _number(entry.get("proposed")), _number(entry.get("accepted"))
            out[source] = DrafterFigures(int(proposed or 0), int(accepted or 0))
    return out


# ----- rendered as text ----------------------------------------------------------------------------


def plural(n: int, word: str) -> str:
    """`1 token`, `2 tokens`, `0 tokens`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def meta_line(figures: ReplyFigures | None, show_timings: bool = True) -> str:
    """E.g. `48 tokens (20 thinking) · 71% accepted · 2.40 tok/pass · K=4 · 51.3 tok/s`."""
    if figures is None:
        return ""
    parts = [plural(figures.tokens, "token")]
    if figures.thinking_tokens:
        parts[0] += f" ({figures.thinking_tokens} thinking)"
    if figures.acceptance is not None:
        parts.append(f"{figures.acceptance:.0%} accepted")
        parts.append(f"{figures.mean_accepted:.2f} tok/pass")
    if figures.k:
        parts.append(f"K={figures.k}")
    if show_timings and figures.held_cycles and figures.target_passes:  # K = auto's timed choice
        parts.append(f"held at K=0 in {figures.held_cycles / figures.target_passes:.0%} of passes (slower otherwise)")
    if show_timings and figures.tps:
        parts.append(f"{figures.tps:.1f} tok/s")
    if figures.sampling:
        parts.append(figures.sampling)
    if reason := REASONS.get(figures.reason):
        parts.append(reason)
    return " · ".join(parts)


def sampling_label(sampling: SamplingConfig) -> str:
    """`T=0 (greedy)`, or `T=0.8 top-p 0.95 top-k 40 min-p 0.05 · seed 1234` (the seed it was drawn with)."""
    if sampling.greedy or sampling.seed is None:
        return sampling.describe()
    return f"{sampling.describe()} · seed {sampling.seed}"


def comparison_verdict(speculative: ReplyFigures | None, plain: ReplyFigures, same_text: bool,
                       show_timings: bool = True) -> str:
    """One line under a side-by-side run: the two speeds, the ratio, and whether texts match."""
    match = "identical text" if same_text else "texts differ (sampling at T > 0, or a stop)"
    if not show_timings:
        return f"speculation off vs on · {match}"
    fast, slow = (speculative.tps if speculative else 0.0), plain.tps
    ratio = f" → {fast / slow:.2f}x" if fast > 0 and slow > 0 else ""
    return f"speculative {fast:.1f} tok/s vs speculation off {slow:.1f} tok/s{ratio} · {match}"


def describe_k(control: DraftControl, drafters: DrafterInfo, last_cycle_k: int | None = None) -> str:
    """K as the user should read it: a number, `auto` (with what it chose), or why it is off."""
    if not drafters.can_speculate:
        return "off (no drafter)"
    if (control.drafter or drafters.default) == "none":
        return "off (drafter: none)"
    k = control.k
    if not control.enabled:
        return "0" if k == 0 else f"off (K={k} when on)"
    if k == AUTO:
        return "auto" if last_cycle_k is None else f"auto (now {last_cycle_k})"
    return str(k)
