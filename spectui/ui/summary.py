"""A finished reply's figures: saved with the message, and shown as a line under it."""

from __future__ import annotations

from typing import Any

from spectui.engine.config import SamplingConfig
from spectui.engine.events import Finished

REASONS = {
    "cancelled": "stopped",
    "length": "cut at --max-tokens",
    "context": "context full",
    "worker": "cut: a worker was lost",
    "file": "cut: a model file changed on disk",
    "interrupted": "interrupted (saved as you quit)",
}


def plural(n: int, word: str) -> str:
    """`1 token`, `2 tokens`, `0 tokens`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def reply_stats(finished: Finished, k_label: str, thinking_tokens: int = 0,
                sampling: SamplingConfig | None = None) -> dict[str, Any]:
    stats = finished.stats
    figures: dict[str, Any] = {
        "reason": finished.reason,
        "tokens": stats.generated_tokens,
        "drafted": stats.drafted,
        "acceptance": stats.acceptance_rate if stats.drafted else None,
        "mean_accepted": stats.mean_accepted,
        "tps": stats.decode_tps,
        "k": k_label,
    }
    if thinking_tokens:
        figures["thinking_tokens"] = thinking_tokens
    if sampling is not None:
        figures["sampling"] = sampling_label(sampling)
    return figures


def sampling_label(sampling: SamplingConfig) -> str:
    """`T=0 (greedy)`, or `T=0.8 top-p 0.95 top-k 40 min-p 0.05 · seed 1234` (the seed it was drawn with)."""
    if sampling.greedy or sampling.seed is None:
        return sampling.describe()
    return f"{sampling.describe()} · seed {sampling.seed}"


def _number(value: object) -> float | None:
    """A stored figure, or None when it is missing or not a number (stats from an old or salvaged
    store are shown as far as they make sense, never as an error)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def meta_line(stats: dict[str, Any], show_timings: bool = True) -> str:
    """E.g. `48 tokens (20 thinking) · 71% accepted · 2.40 tok/pass · K=4 · 51.3 tok/s`."""
    if not stats:
        return ""
    parts = [plural(int(_number(stats.get("tokens")) or 0), "token")]
    if thinking := _number(stats.get("thinking_tokens")):
        parts[0] += f" ({int(thinking)} thinking)"
    if (acceptance := _number(stats.get("acceptance"))) is not None:
        parts.append(f"{acceptance:.0%} accepted")
        parts.append(f"{_number(stats.get('mean_accepted')) or 0:.2f} tok/pass")
    if stats.get("k"):
        parts.append(f"K={stats['k']}")
    if show_timings and (tps := _number(stats.get("tps"))):
        parts.append(f"{tps:.1f} tok/s")
    if isinstance(sampled := stats.get("sampling"), str) and sampled:
        parts.append(sampled)
    if reason := REASONS.get(str(stats.get("reason", ""))):
        parts.append(reason)
    return " · ".join(parts)


def comparison_verdict(speculative: dict[str, Any], plain: Finished, same_text: bool,
                       show_timings: bool = True) -> str:
    """One line under a side-by-side run: the two speeds, the ratio, and whether texts match."""
    match = "identical text" if same_text else "texts differ (sampling at T > 0, or a stop)"
    if not show_timings:
        return f"speculation off vs on · {match}"
    fast, slow = _number(speculative.get("tps")) or 0.0, plain.stats.decode_tps
    ratio = f" → {fast / slow:.2f}x" if fast > 0 and slow > 0 else ""
    return f"speculative {fast:.1f} tok/s vs speculation off {slow:.1f} tok/s{ratio} · {match}"
