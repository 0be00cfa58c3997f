"""A finished reply's figures: saved with the message, and shown as a line under it."""

from __future__ import annotations

from typing import Any

from spectui.engine.events import Finished

REASONS = {
    "cancelled": "stopped",
    "length": "cut at --max-tokens",
    "context": "context full",
    "worker": "cut: a worker was lost",
}


def reply_stats(finished: Finished, k_label: str) -> dict[str, Any]:
    stats = finished.stats
    return {
        "reason": finished.reason,
        "tokens": stats.generated_tokens,
        "drafted": stats.drafted,
        "acceptance": stats.acceptance_rate if stats.drafted else None,
        "mean_accepted": stats.mean_accepted,
        "tps": stats.decode_tps,
        "k": k_label,
    }


def meta_line(stats: dict[str, Any], show_timings: bool = True) -> str:
    """E.g. `48 tokens · 71% accepted · 2.40 tok/pass · K=4 · 51.3 tok/s`."""
    if not stats:
        return ""
    parts = [f"{stats.get('tokens', 0)} tokens"]
    if stats.get("acceptance") is not None:
        parts.append(f"{stats['acceptance']:.0%} accepted")
        parts.append(f"{stats.get('mean_accepted', 0):.2f} tok/pass")
    if stats.get("k"):
        parts.append(f"K={stats['k']}")
    if show_timings and stats.get("tps"):
        parts.append(f"{stats['tps']:.1f} tok/s")
    if reason := REASONS.get(stats.get("reason", "")):
        parts.append(reason)
    return " · ".join(parts)


def comparison_verdict(speculative: dict[str, Any], plain: Finished, same_text: bool,
                       show_timings: bool = True) -> str:
    """One line under a side-by-side run: the two speeds, the ratio, and whether texts match."""
    match = "identical text" if same_text else "texts differ (sampling at T > 0, or a stop)"
    if not show_timings:
        return f"speculation off vs on · {match}"
    fast, slow = speculative.get("tps") or 0.0, plain.stats.decode_tps
    ratio = f" → {fast / slow:.2f}x" if fast > 0 and slow > 0 else ""
    return f"speculative {fast:.1f} tok/s vs speculation off {slow:.1f} tok/s{ratio} · {match}"
