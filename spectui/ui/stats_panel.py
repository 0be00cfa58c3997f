"""The live speculation panel: acceptance, mean accepted length, K, speed against the baseline.

The figures are computed by pure functions (`figures`, `low_acceptance_advice`; K's label is
`session.figures.describe_k`, shared with the figures saved under each reply) so
they can be tested without a screen; `StatsPanel` only lays them out, with two sparklines of the
current reply: acceptance per cycle (where the draft agrees) and tokens/sec per cycle.
After a reply the panel keeps that reply's figures until the next one starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline, Static

from spectui.engine import drafters as registry
from spectui.engine.drafters.spec import DrafterInfo
from spectui.engine.events import CycleStats, GenerationStats
from spectui.engine.generation_config import DraftControl
from spectui.safe_text import line
from spectui.session.baseline import Baseline, from_plain_cycles
from spectui.session.figures import describe_k

HIDDEN = "(hidden)"
PERCENT = re.compile(r"\d+(?:\.\d+)?%")
"""Acceptance during the calibration depends on K=auto's timed choices: hidden with the timings."""
NONE_YET = "—"
MIN_MEASURED_TOKENS = 16
"""A reply that decoded fewer tokens is too short for a speed ratio worth showing: a handful of
cycles, each paying a first draft pass, says more about noise than about speculation."""
LOW_ACCEPTANCE = 0.4
MIN_DRAFTED_FOR_ADVICE = 16


def describe_drafter(control: DraftControl, drafters: DrafterInfo) -> str:
    """Which drafter proposes: "draft model NAME", "n-gram lookup", … or why none does."""
    if not drafters.can_speculate:
        return "none"
    return drafters.label(control.drafter)


def figures(totals: GenerationStats | None, baseline: Baseline | None,
            show_timings: bool = True, measuring: bool = True) -> list[tuple[str, str]]:
    """(label, value) rows of the panel, for this reply and the baseline (`measuring`: a model
    is loading and its baseline will follow; False after a failed load)."""
    drafted = totals is not None and totals.drafted > 0
    passes = totals is not None and totals.target_passes > 0
    tps = totals.decode_tps if totals is not None else 0.0
    rows = [
        ("acceptance", f"{totals.acceptance_rate:.0%}" if drafted and totals else NONE_YET),
        ("mean accepted", f"{totals.mean_accepted:.2f} tok/pass" if passes and totals else NONE_YET),
        ("first token", _first_token(totals, show_timings)),
        ("this reply", _speed(tps, show_timings)),
        ("baseline (K=0)", _speed(baseline.tokens_per_second, show_timings) if baseline
         else "measuring…" if measuring else NONE_YET),
    ]
    rows.append(("speedup", _speedup(tps, baseline, show_timings, totals)))
    if totals is not None and totals.tree_cycles:
        rows.append(("token trees", describe_trees(totals)))
    if totals is not None and totals.round_trips:
        off = f" (K=0: {baseline.round_trips_per_token:.2f})" if baseline and baseline.round_trips_per_token else ""
        rows.append(("round trips", f"{totals.round_trips_per_token:.2f}/token{off}"))
        if show_timings:
            rows.append(("waiting on workers", f"{totals.network_wait_seconds:.1f} s"))
    return rows


def describe_trees(totals: GenerationStats) -> str:
    """How much of the reply went through token trees, and their size: `40% of passes, 7.5 nodes
    in 2.2 branches` (shown only when a tree was verified)."""
    nodes, branches = totals.mean_tree
    share = totals.tree_cycles / totals.target_passes if totals.target_passes else 0.0
    return f"{share:.0%} of passes, {nodes:.1f} nodes in {branches:.1f} branches"


def _speed(tps: float, show_timings: bool) -> str:
    if not show_timings:
        return HIDDEN
    return f"{tps:.1f} tok/s" if tps > 0 else NONE_YET


def _first_token(totals: GenerationStats | None, show_timings: bool) -> str:
    """Time to the first token (reading the prompt): shown apart from the decode speed."""
    if not show_timings:
        return HIDDEN
    if totals is None or totals.prompt_seconds <= 0:
        return NONE_YET
    return f"{totals.prompt_seconds:.2f} s ({totals.prompt_tokens} prompt tok)"


def too_short(totals: GenerationStats | None) -> bool:
    """Too little decoded (after any probe) for its speed to mean anything yet."""
    return totals is None or totals.decode_tokens < MIN_MEASURED_TOKENS


def _speedup(tps: float, baseline: Baseline | None, show_timings: bool,
             totals: GenerationStats | None = None) -> str:
    if not show_timings:
        return HIDDEN
    if baseline is None or tps <= 0 or baseline.tokens_per_second <= 0:
        return NONE_YET
    if too_short(totals):
        return f"— (too short to measure: {totals.decode_tokens if totals else 0} tokens)"
    return f"{tps / baseline.tokens_per_second:.2f}x"


def hold_note(totals: GenerationStats | None) -> str:
    """When and why K = auto held speculation back (drafting would have made the reply slower):
    in how many of the reply's passes, and the reason as of the last one; "" when it never did."""
    if totals is None or totals.held is None:
        return ""
    share = totals.held_cycles / totals.target_passes if totals.target_passes else 0.0
    return f"held at K = 0 in {share:.0%} of passes: {totals.held.describe()}"


def low_acceptance_advice(totals: GenerationStats, k_label: str, same_model: bool = False) -> str | None:
    """After a reply: suggest a smaller K or speculation off when the draft mostly missed.

    `same_model`: the draft is the target's own model at another precision (the demo pair), so a
    draft "from the same family" is no advice; a less quantized draft or a lower temperature is.
    """
    # judged on the chains only: a tree's alternatives would read as misses (chain_acceptance_rate)
    if totals.chain_drafted < MIN_DRAFTED_FOR_ADVICE or totals.chain_acceptance_rate >= LOW_ACCEPTANCE:
        return None
    if totals.held is not None:
        return None  # K = auto already held back where drafting did not pay (`hold_note` says so)
    better = ("the draft is this model at a lower precision: a less quantized draft agrees more "
              "(and costs more), and a lower --temperature raises acceptance" if same_model
              else "a draft from the same family may agree more")
    return (f"acceptance stayed low ({totals.chain_acceptance_rate:.0%} at K={k_label}): try a smaller K "
            f"(F2), K=auto, or speculation off (F4); {better}")


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
    warm_note: str = ""
    """What the calibration after load paid for in advance (warm start)."""
    measuring: bool = True
    """A model is loading and the baseline will be measured; False once that ended or failed."""
    gpu_line: str = ""
    """A GPU this machine has and llama.cpp cannot use (`spectui doctor` says how); empty: none."""
    settings_line: str = ""
    """The chat's settings in one line (`T=0.8 top-p 0.95 · seed 7 · thinking on`)."""
    thinking_tokens: int | None = None
    """Tokens of the reply's reasoning (None: it has none); counted on the reply's tokens at its end."""
    thinking_tps: float = 0.0
    """Decode speed while it was thinking (read when the answer began)."""
    thinking_live: bool = False
    """The reply is still thinking."""

    def compared_baseline(self) -> Baseline | None:
        """What this reply's speed is compared with: its own passes that verified no draft once
        there are enough of them (measured under its own conditions), else `baseline`."""
        return from_plain_cycles(self.cycles) or self.baseline

    def follow_thinking(self, still_thinking: bool) -> None:
        """After a batch of a reply that has reasoning: count it while it lasts, then freeze."""
        totals = self.totals
        if still_thinking and totals is not None:
            self.thinking_tokens, self.thinking_tps = totals.generated_tokens, totals.decode_tps
            self.thinking_live = True
        elif self.thinking_live:
            self.thinking_live = False
        elif self.thinking_tokens is None:
            self.thinking_tokens = 0  # thought and answered within one batch: counted at the end

    def thinking_value(self, show_timings: bool) -> str | None:
        if self.thinking_tokens is None:
            return None
        if self.thinking_live:
            return f"{self.thinking_tokens} tokens so far…"
        speed = f" · {self.thinking_tps:.1f} tok/s" if show_timings and self.thinking_tps > 0 else ""
        return f"{self.thinking_tokens} tokens{speed}"


class StatsPanel(Vertical):
    """Right-hand panel; call `show()` after changing `state`."""

    def __init__(self, show_timings: bool = True, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.show_timings = show_timings
        self.state = PanelState()
        self._shown: dict[str, str] = {}
        """Each line's text as last shown, by widget id (`_put`)."""

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-line")
        yield Static(id="settings-line")
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
        if self.show_timings:
            self.set_interval(30, self.show)  # the baseline's age ("3 min ago") stays true

    def show_k(self, control: DraftControl, drafters: DrafterInfo, last_cycle_k: int | None,
               renamed: Callable[[str], str]) -> None:
        """K and the drafter as they stand (`last_cycle_k`: what K=auto chose last)."""
        self.state.k_label = describe_k(control, drafters, last_cycle_k)
        self.state.drafter_label = renamed(describe_drafter(control, drafters))
        self.show()

    def start_measuring(self) -> None:
        """Models are loading: their baseline follows (the last pair's is gone)."""
        self.state.measuring = True
        self.state.baseline = None
        self.show()

    def measured(self, baseline: Baseline | None, warm_note: str | None) -> None:
        """The measurement after a load ended: its baseline (None: none measured, the last kept)
        and what the warm start paid for (None: the load failed, the note stays)."""
        self.state.measuring = False
        if baseline is not None:
            self.state.baseline = baseline
        if warm_note is not None:
            self.state.warm_note = warm_note
        self.show()

    def show_gpu_line(self, text: str) -> None:
        """A GPU this machine has and llama.cpp cannot use."""
        self.state.gpu_line = text
        self.show()

    def show_baseline(self, baseline: Baseline | None) -> None:
        """The speculation-off speed the figures compare with (None: the models were unloaded)."""
        self.state.baseline = baseline
        self.show()

    def show_settings(self, settings_line: str) -> None:
        """The chat's settings in one line."""
        self.state.settings_line = settings_line
        self.show()

    def start_reply(self) -> None:
        """A reply starts: the last one's figures give way (its notes stay until it ends)."""
        self.state.totals = None
        self.state.cycles = []
        self.state.thinking_tokens, self.state.thinking_tps, self.state.thinking_live = None, 0.0, False
        self.show()

    def start_chat(self) -> None:
        """A new chat: no reply's figures, no notes."""
        self.state.notes = []
        self.start_reply()

    def reply_progress(self, cycles: Sequence[CycleStats], totals: GenerationStats | None, k_label: str | None,
                       thinking: bool | None) -> None:
        """A batch of the reply: its `cycles`, the `totals` so far (None: unchanged), K's label
        after them (None: unchanged) and, for a reply with reasoning, whether it is still thinking."""
        state = self.state
        state.cycles.extend(cycles)
        state.totals = totals or state.totals
        if k_label is not None:
            state.k_label = k_label
        if thinking is not None:
            state.follow_thinking(thinking)
        self.show()

    def reply_finished(self, totals: GenerationStats, thinking_tokens: int | None, same_model: bool) -> str | None:
        """The reply ended with these `totals` (and `thinking_tokens` of reasoning, counted on its
        tokens); the advice for a low acceptance, shown in the notes and returned (None: none)."""
        state = self.state
        state.totals = totals
        if thinking_tokens:
            state.thinking_tokens, state.thinking_live = thinking_tokens, False
        advice = low_acceptance_advice(totals, state.k_label, same_model)
        state.notes = [advice] if advice else []
        self.show()
        return advice

    def show(self) -> None:
        state = self.state
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="dim")
        grid.add_column(style="bold")
        compared = state.compared_baseline()
        rows = [("drafter", state.drafter_label), ("K (draft length)", state.k_label),
                *figures(state.totals, compared, self.show_timings, state.measuring)]
        if (thinking := state.thinking_value(self.show_timings)) is not None:
            rows.append(("thinking", thinking))
        width = max((len(label) for label, _ in rows), default=0)
        for label, value in rows:  # Text, not markup: a drafter's label names its file
            grid.add_row(Text(label), Text(line(value)))
        self._put("figures", "\n".join(f"{label:<{width}}  {line(value)}" for label, value in rows), grid)
        self._put("gpu-line", line(state.gpu_line))
        self.query_one("#gpu-line", Static).display = bool(state.gpu_line)
        self._put("settings-line", line(state.settings_line))
        self.query_one("#accept-spark", Sparkline).data = acceptance_series(state.cycles)
        speeds = speed_series(state.cycles) if self.show_timings else []
        self.query_one("#speed-spark", Sparkline).data = speeds
        self._put("baseline-note", line(self._baseline_note(compared)))
        warm = state.warm_note if self.show_timings else PERCENT.sub(HIDDEN, state.warm_note)
        held = hold_note(state.totals) if self.show_timings else ""  # it follows the timings
        notes = "\n".join(line(note) for note in [held, *state.notes, warm] if note).strip()
        self._put("panel-notes", notes)

    def _put(self, widget_id: str, plain: str, content: Table | None = None) -> None:
        """Show `plain` (as Text, not markup) or `content`, whose text it is, in the panel's Static
        `widget_id`, only if that text changed, and with a layout only if its height may have. A
        layout reflows the whole screen, the chat's every block included: asked for by each of a
        reply's ~10 batches a second it took ~40 % of a core beside the model (docs/BENCHMARKS.md,
        "The app's own cost")."""
        if self._shown.get(widget_id) == plain:
            return
        widget = self.query_one(f"#{widget_id}", Static)
        before, self._shown[widget_id] = self._shown.get(widget_id), plain
        room = widget.content_region.width

        def fits(text: str) -> bool:
            return room > 0 and all(cell_len(part) <= room for part in text.split("\n"))

        same_height = before is not None and before.count("\n") == plain.count("\n") and fits(before) and fits(plain)
        widget.update(Text(plain) if content is None else content, layout=not same_height)

    def _baseline_note(self, baseline: Baseline | None) -> str:
        """The line under the figures: what `baseline` (the one the reply is compared with) is."""
        if baseline is None:
            if not self.state.measuring:
                return "baseline: none (no model loaded, or the measurement was stopped)"
            return "baseline: measuring with K=0 after load…"
        return baseline.describe(with_time=self.show_timings)

    def show_legend(self, colouring: bool) -> None:
        self.query_one("#legend", Static).update(legend_text() if colouring else Text())


def legend_text() -> Text:
    """One swatch per family of drafters (`registry.legend`, from each kind's colour), and the
    target's own tokens."""
    legend = Text("accepted from: ")
    for colour, words in registry.legend():
        legend.append(f"■ {words}  ", style=colour)
    legend.append("■ the target's own", style="default")
    return legend
