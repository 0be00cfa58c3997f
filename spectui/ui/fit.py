"""The app at any terminal size from `MIN_WIDTH` x `MIN_HEIGHT` up; below it, one line asking for a
larger window instead of a layout with no room (Textual's text area cannot wrap its placeholder
in zero columns: `range() arg 3 must not be zero`). `SpectuiApp` holds a `Fitting` and hands it
every size, at start and on each resize.

What gives way as the terminal shrinks: the speculation panel (38 columns; under
`PANEL_MIN_WIDTH` the figures stay in each reply's line), the status line's progress bar, the
header, the key footer. The chat log, the status text and the message box always stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from spectui.ui.core import AppCore

MIN_WIDTH, MIN_HEIGHT = 20, 6
PANEL_MIN_WIDTH = 80
PROGRESS_MIN_WIDTH = 60
"""Narrower, the status line keeps its text and the progress bar gives way."""
HEADER_MIN_HEIGHT = 16
FOOTER_MIN_HEIGHT = 10
TOO_SMALL = f"make the window larger: spectui needs at least {MIN_WIDTH}x{MIN_HEIGHT} (Ctrl+Q quits)"


@dataclass(frozen=True)
class Fit:
    """What is shown at one terminal size."""

    too_small: bool
    panel: bool
    header: bool
    footer: bool


def fit(width: int, height: int) -> Fit:
    return Fit(too_small=width < MIN_WIDTH or height < MIN_HEIGHT, panel=width >= PANEL_MIN_WIDTH,
               header=height >= HEADER_MIN_HEIGHT, footer=height >= FOOTER_MIN_HEIGHT)


class TooSmall(Screen[None]):
    """Covers every screen while the terminal is below the minimum."""

    DEFAULT_CSS = """
    TooSmall { align: center middle; }
    TooSmall Static { width: 100%; height: auto; content-align: center middle; text-align: center; }
    """
    def compose(self) -> ComposeResult:
        yield Static(TOO_SMALL, id="too-small")


class Fitting:
    """The app's fit to the terminal: applies `fit` to `app` at each size it is given."""

    def __init__(self, app: AppCore) -> None:
        self.app = app
        self.too_small: TooSmall | None = None
        """The too-small screen while it covers the app."""

    def fit_to(self, width: int, height: int) -> None:
        app, shown = self.app, fit(width, height)
        for selector, visible in (("#stats", shown.panel), ("Header", shown.header), ("Footer", shown.footer)):
            for widget in app.query(selector):  # the app's queries look in its main screen
                widget.display = visible
        app.status_line.fit_progress(width >= PROGRESS_MIN_WIDTH)
        if shown.too_small and self.too_small is None:
            self.too_small = TooSmall()
            app.push_screen(self.too_small)
        elif not shown.too_small and self.too_small is not None and app.screen is self.too_small:
            self.too_small = None
            app.pop_screen()

