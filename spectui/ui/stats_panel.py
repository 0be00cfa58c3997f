"""The live speculation panel: acceptance, mean accepted length, K, speed against the baseline.

The figures are computed by pure functions (`figures`, `describe_k`, `low_acceptance_advice`) so
they can be tested without a screen; `StatsPanel` only lays them out, with two sparklines of the
current reply: acceptance per cycle (where the draft agrees) and tokens/sec per cycle.
After a reply the panel keeps that reply's figures until the next one starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline, Static

from spectui.engine.config import AUTO, DraftControl
from spectui.engine.drafters.spec import DrafterInfo
from spectui.engine.events import CycleStats, GenerationStats
from spectui.session.baseline import Baseline
from spectui.ui.chat_view import ORIGIN_STYLES

HIDDEN = "(hidden)"
NONE_YET = "—"
LOW_ACCEPTANCE = 0.4
MIN_DRAFTED_FOR_ADVICE = 16


def describe_k(control: DraftControl, drafters: DrafterInfo, last_cycle_k: int | None = None) -> str:
    """K as the user should read it: a number, `auto` (with what it chose), or why it is off."""
    if not drafters.can_speculate:
        return "off (no drafter)"
    if (control.drafter or drafters.default) == "none":
        return "off (drafter: none)"
    k = control.k
    if not control.enabled:
        return f"off (K={k} when on)"
    if k == AUTO:
        return "auto" if last_cycle_k is None else f"auto (now {last_cycle_k})"
    return str(k)


def describe_drafter(control: DraftControl, drafters: DrafterInfo) -> str:
    """Which drafter proposes: "draft model NAME", "n-gram lookup", … or why none does."""
    if not drafters.can_speculate:
        return "none"
    return drafters.label(control.drafter)


def figures(totals: GenerationStats | None, baseline: Baseline | None,
            show_timings: bool = True) -> list[tuple[str, str]]:
    """(label, value) rows of the panel, for this reply and the baseline."""
    drafted = totals is not None and totals.drafted > 0
    passes = totals is not None and totals.target_passes > 0
    tps = totals.decode_tps if totals is not None else 0.0
    rows = [
        ("acceptance", f"{totals.acceptance_rate:.0%}" if drafted and totals else NONE_YET),
        ("mean accepted", f"{totals.mean_accepted:.2f} tok/pass" if passes and totals else NONE_YET),
        ("this reply", _speed(tps, show_timings)),
        ("baseline (K=0)", _speed(baseline.tokens_per_second, show_timings) if baseline else "measuring…"),
    ]
    rows.append(("speedup", _speedup(tps, baseline, show_timings)))
    return rows


def _speed(tps: float, show_timings: bool) -> str:
    if not show_timings:
        return HIDDEN
    return f"{tps:.1f} tok/s" if tps > 0 else NONE_YET


def _speedup(tps: float, baseline: Baseline | None, show_timings: bool) -> str:
    if not show_timings:
        return HIDDEN
    if baseline is None or tps <= 0 or baseline.tokens_per_second <= 0:
        return NONE_YET
    return f"{tps / baseline.tokens_per_second:.2f}x"


def low_acceptance_advice(totals: GenerationStats, k_label: str) -> str | None:
    """After a reply: suggest a smaller K or speculation off when the draft mostly missed."""
    if totals.drafted < MIN_DRAFTED_FOR_ADVICE or totals.acceptance_rate >= LOW_ACCEPTANCE:
        return None
    return (
        f"acceptance stayed low ({totals.acceptance_rate:.0%} at K={k_label}): try a smaller K "
        "(F2), K=auto, or speculation off (F4); a draft from the same family may agree more"
    )


def acceptance_series(cycles: Iterable[CycleStats]) -> list[float]:
    return [c.accepted / c.drafted for c in cycles if c.drafted > 0]


def speed_series(cycles: Iterable[CycleStats]) -> list[float]:
    return [c.emitted / c.seconds for c in cycles if c.seconds > 0]


@dataclass
class PanelState:
    k_label: str = NONE_YET
    drafter_label: str = NONE_YET
    totals: GenerationStats | None = None
    baseline: Baseline | None = None
    cycles: list[CycleStats] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class StatsPanel(Vertical):
    """Right-hand panel; call `show()` after changing `state`."""

    def __init__(self, show_timings: bool = True, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.show_timings = show_timings
        self.state = PanelState()

    def compose(self) -> ComposeResult:
        yield Static(id="figures")
        yield Label("acceptance per cycle", classes="spark-label")
        yield Sparkline([], id="accept-spark")
        yield Label("tokens/s per cycle", classes="spark-label")
        yield Sparkline([], id="speed-spark")
        yield Static(id="baseline-note", classes="note")
        yield Static(id="legend", classes="note")
        yield Static(id="panel-notes", classes="note")

    def on_mount(self) -> None:
        self.show()

    def start_reply(self) -> None:
        self.state.totals = None
        self.state.cycles = []
        self.show()

    def show(self) -> None:
        state = self.state
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim")
        grid.add_column(style="bold")
        grid.add_row("drafter", state.drafter_label)
        grid.add_row("K (draft length)", state.k_label)
        for label, value in figures(state.totals, state.baseline, self.show_timings):
            grid.add_row(label, value)
        self.query_one("#figures", Static).update(grid)
        self.query_one("#accept-spark", Sparkline).data = acceptance_series(state.cycles)
        speeds = speed_series(state.cycles) if self.show_timings else []
        self.query_one("#speed-spark", Sparkline).data = speeds
        self.query_one("#baseline-note", Static).update(self._baseline_note())
        self.query_one("#panel-notes", Static).update("\n".join(state.notes))

    def _baseline_note(self) -> str:
        baseline = self.state.baseline
        if baseline is None:
            return "baseline: measuring with K=0 after load…"
        return baseline.describe(with_time=self.show_timings)

    def show_legend(self, colouring: bool) -> None:
        self.query_one("#legend", Static).update(legend_text() if colouring else Text())


LEGEND = (("model", "draft model"), ("ngram", "lookup (n-gram, suffix)"), ("mtp", "MTP heads"))
"""Which drafter each colour stands for (`chat_view.ORIGIN_STYLES`), in the legend's words."""


def legend_text() -> Text:
    """One swatch per origin: tokens accepted from each kind of drafter, and the target's own."""
    legend = Text("accepted from: ")
    for origin, words in LEGEND:
        legend.append(f"■ {words}  ", style=ORIGIN_STYLES[origin])
    legend.append("■ the target's own", style="default")
    return legend
