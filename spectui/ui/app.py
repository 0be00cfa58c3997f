"""`SpectuiApp`: the chat log, the message box, and the live speculation panel beside them.

Its widgets own their state and the keys that change it: the chat pane (`ChatPane`: the chat,
the reply flow, the chat's keys and actions), the panel (`StatsPanel`), the status line, and the
engine host (`EngineHost`, never shown: the pair of models and its draft control, every engine
worker, what the loading workers report). The app holds what is the app's alone: the layout,
switching pairs, the command palette, and its parts `lifecycle` (quitting without losing the
reply, signals, loading the pair again after a fault) and `fit` (any terminal size down to 20x6).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Header

from spectui import faults
from spectui.session.options import ChatOptions
from spectui.ui.chat_column import ChatHost
from spectui.ui.chat_palette import ChatCommands
from spectui.ui.core import AppCore
from spectui.ui.engine_host import EngineClient
from spectui.ui.fit import Fitting
from spectui.ui.lifecycle import Lifecycle
from spectui.ui.pair_palette import LocalPairCommands, PairCommands
from spectui.ui.stats_panel import StatsPanel


class SpectuiApp(AppCore):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "spectui"
    COMMANDS = App.COMMANDS | {ChatCommands, PairCommands, LocalPairCommands}
    BINDINGS: ClassVar[list[BindingType]] = [  # the app's own; the chat's keys are the chat pane's
        Binding("ctrl+p", "command_palette", "Pairs & commands", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "copy_or_quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, options: ChatOptions, store_path: Path | None = None) -> None:
        super().__init__(options, store_path)
        self.lifecycle = Lifecycle(self)
        """Quitting without losing the reply, the signals, loading the pair again after a fault."""
        self.fitting = Fitting(self)
        """What is shown at the terminal's size."""

    # ----- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield self.chat_pane
            yield StatsPanel(show_timings=self.pair.options.show_timings, id="stats")
        yield Footer()
        yield self.engine

    async def on_mount(self) -> None:
        self.chat.store.attach(self.store_notice)
        self.refresh_subtitle()
        self.refresh_k()
        if self.pair.options.resume:
            await self.chat_pane.resume_last_chat()
        self.chat_pane.refresh_settings()
        self.prompt.focus()
        if self.pair.options.notice:
            await self.note(self.pair.options.notice)
        self.lifecycle.install_signal_handlers()
        self.fitting.fit_to(self.size.width, self.size.height)
        self.engine.start_loading(self.pair.options)

    def on_unmount(self) -> None:
        self.lifecycle.save_streamed()  # whatever ended the app (a crash too): the reply on screen is kept
        self.lifecycle.remove_signal_handlers()
        self.chat_pane.stop_reply(status=None)
        self.workers.cancel_all()
        self.engine.free_models()
        self.chat.store.close()
        self.lifecycle.cancel_watchdog()

    def on_resize(self, event: events.Resize) -> None:
        self.fitting.fit_to(event.size.width, event.size.height)

    # ----- quitting, the lifecycle's ---------------------------------------------------------------

    async def action_quit(self) -> None:
        """Ctrl+Q: quit, saving the reply in progress first."""
        self.lifecycle.request_quit()

    def action_copy_or_quit(self) -> None:
        """Ctrl+C: copy the selected text if there is some, else quit as Ctrl+Q does."""
        self.lifecycle.copy_or_quit()

    def on_bus_error(self) -> faults.Fault:
        """A SIGBUS: what is on screen saved, the terminal given back, the file named."""
        return self.lifecycle.on_bus_error()

    async def reload_first(self, text: str) -> bool:
        """Before sending `text`: load the pair again first when a fault asks for it."""
        return await self.lifecycle.reload_first(text)

    # ----- the pair, as the engine host reports it ------------------------------------------------

    def show_models(self, loaded: bool) -> None:
        """The pair changed: a load started (no mode yet), or the models loaded (the chat's mode
        with them, its settings)."""
        self.chat_pane.set_mode(self.chat_pane.chat_mode(self.chat.conversation) if loaded else "")
        self.refresh_subtitle()
        if loaded:
            self.chat_pane.refresh_settings()

    def choose_pair(self, name: str, pulled: bool) -> None:
        """From the pair picker: load a pulled pair, or pull it first (with progress)."""
        if self.replies.busy is not None:
            self.chat_pane.stop_reply()
        self.set_status(f"{'opening' if pulled else 'pulling'} pair {name}…", None)
        self.engine.open_pair(name, pulled)


if TYPE_CHECKING:
    def _hosts_the_chat_pane(app: SpectuiApp) -> ChatHost:
        """The type checker's proof that the app gives the chat pane all it asks for."""
        return app

    def _hosts_the_engine(app: SpectuiApp) -> EngineClient:
        """The type checker's proof that the app gives the engine host all it asks for."""
        return app
