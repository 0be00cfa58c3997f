"""The status line above the chat: what the app is doing, a progress bar while it loads or pulls,
and "1 message queued" while a message waits for the models."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, ProgressBar

from spectui import safe_text

QUEUED = "1 message queued (Escape cancels)"


class StatusLine(Horizontal):
    """`#status-bar`: the `#status` label and the `#load-progress` bar; it owns what they show."""

    def __init__(self, **kwargs: str) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.text = ""
        """What the app is doing, as last shown (without the queued suffix)."""
        self.fraction: float | None = None
        """The progress bar's fraction (None: an indeterminate bar)."""
        self.busy = True
        """Something is under way: the progress bar shows (where it has room, and `bar` is set)."""
        self.bar = True
        """A bar belongs to what is under way: not to a reply, which shows its own progress as it
        streams (an indeterminate bar animates: ~15 redraws a second beside the model's threads)."""
        self.queued = False
        """A message waits for the models: the line says so (shown from the next `redraw`)."""
        self.progress_room = True
        """The terminal is wide enough for the progress bar beside the text (`fit.py` decides)."""

    def compose(self) -> ComposeResult:
        yield Label("", id="status")
        yield ProgressBar(id="load-progress", show_eta=False)

    def show(self, text: str, fraction: float | None = None, *, busy: bool = True, bar: bool = True) -> None:
        self.text, self.fraction, self.busy, self.bar = text, fraction, busy, bar
        self.redraw()

    def redraw(self) -> None:
        queued = f" · {QUEUED}" if self.queued else ""
        self.query_one("#status", Label).update(safe_text.content(self.text + queued))
        bar = self.query_one("#load-progress", ProgressBar)
        bar.display = self.busy and self.bar and self.progress_room
        bar.update(total=None if self.fraction is None else 1.0, progress=self.fraction or 0.0)

    def fit_progress(self, room: bool) -> None:
        """The progress bar shows only where the status text keeps room."""
        self.progress_room = room
        self.redraw()
