"""`SpectuiApp`: the chat log, the message box, and the live speculation panel beside them.

Its widgets own their state: the chat pane (`ChatPane`: the chat, the reply flow), the panel
(`StatsPanel`), the status line, and the engine host (`EngineHost`, never shown: the pair of
models, every engine worker, what the loading workers report). The app's own parts: `controls`
(speculation keys, chats, the reply keys), `chat_actions` (resume, settings, thinking, copy,
export), `lifecycle` (quitting without losing the reply, signals, loading the pair again after a
fault), `fit` (any terminal size down to 20x6).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Header

from spectui.catalog.demo import welcome
from spectui.ui.chat_actions import ChatActions
from spectui.ui.chat_column import ChatHost
from spectui.ui.chat_palette import ChatCommands
from spectui.ui.chat_view import NoteMessage
from spectui.ui.controls import Controls
from spectui.ui.engine_host import EngineClient
from spectui.ui.examples import ExampleOpenings
from spectui.ui.fit import Fitting
from spectui.ui.lifecycle import Lifecycle
from spectui.ui.pair_palette import LocalPairCommands, PairCommands
from spectui.ui.stats_panel import StatsPanel


class SpectuiApp(Lifecycle, Fitting, Controls, ChatActions):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "spectui"
    COMMANDS = App.COMMANDS | {ChatCommands, PairCommands, LocalPairCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f2", "k_down", "K-"),
        Binding("f3", "k_up", "K+"),
        Binding("f4", "toggle_speculation", "Spec"),
        Binding("f5", "compare", "K=0"),
        Binding("f6", "toggle_colours", "Colours"),
        Binding("f7", "next_drafter", "Drafter"),
        Binding("f8", "examples", "Examples", show=False),
        Binding("f9", "copy_reply", "Copy", show=False),
        Binding("f10", "export", "Export", show=False),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Regenerate", show=False),
        Binding("ctrl+t", "toggle_thinking", "Thinking", show=False),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+n", "new_chat", "New chat", show=False),
        Binding("ctrl+o", "open_chats", "Chats"),
        Binding("ctrl+p", "command_palette", "Pairs & commands", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "copy_or_quit", "Quit", show=False, priority=True),
    ]

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
        self.sub_title = self.subtitle(self.pair.options)
        self.refresh_k()
        if self.pair.options.resume:
            await self.resume_last_chat()
        self.refresh_settings()
        self.prompt.focus()
        if self.pair.options.notice:
            await self.note(self.pair.options.notice)
        self.install_signal_handlers()
        self.fit_to(self.size.width, self.size.height)
        self.engine.start_loading(self.pair.options)

    def on_unmount(self) -> None:
        self.save_streamed()  # whatever ended the app (a crash too): the reply on screen is kept
        self.remove_signal_handlers()
        self.chat_pane.stop_reply(status=None)
        self.workers.cancel_all()
        self.engine.free_models()
        self.chat.store.close()
        self.cancel_watchdog()

    # ----- the pair, as the engine host reports it ------------------------------------------------

    def show_models(self, loaded: bool) -> None:
        """The pair changed: a load started (no mode yet), or the models loaded (the chat's mode
        with them, its settings)."""
        self.chat_pane.set_mode(self.chat_mode(self.chat.conversation) if loaded else "")
        self.sub_title = self.subtitle(self.pair.options)
        if loaded:
            self.refresh_settings()

    async def show_examples(self) -> None:
        """On an empty chat: what a built-in demo pair is; in completion mode, what a base model
        does, and openings to start from."""
        for old in [*self.query(ExampleOpenings), *self.query(".welcome")]:
            await old.remove()
        if self.chat.conversation.messages:
            return
        if line := welcome(self.pair.options.pair_name):
            await self.log_view.add(NoteMessage(line, "info welcome"))
        if self.chat.mode == "completion":
            await self.log_view.add(ExampleOpenings(id="examples"))

    def action_examples(self) -> None:
        examples = self.query(ExampleOpenings)
        if examples:
            examples.first().focus_next_example()
        else:
            self.notify("example openings are offered for a base model (completion mode) on a new chat")

    async def on_example_openings_picked(self, message: ExampleOpenings.Picked) -> None:
        await self.chat_pane.submit(message.text)


if TYPE_CHECKING:
    def _hosts_the_chat_pane(app: SpectuiApp) -> ChatHost:
        """The type checker's proof that the app gives the chat pane all it asks for."""
        return app

    def _hosts_the_engine(app: SpectuiApp) -> EngineClient:
        """The type checker's proof that the app gives the engine host all it asks for."""
        return app
