"""`SpectuiApp`: the chat log, the message box, and the live speculation panel beside them.

The app owns the UI state and the loading of models; the workers (`spectui.ui.workers`) own every
llama.cpp call and report through messages. Its mixins: `controls` (speculation keys, chats),
`replies` (sending, queueing, editing, regenerating, streaming replies), `chat_actions` (resume,
settings, thinking, copy, export), `lifecycle` (quitting without losing the reply, signals,
loading the pair again after a fault), `fit` (any terminal size down to 20x6).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Header

from spectui.catalog.demo import welcome
from spectui.engine.drafters.spec import DrafterInfo
from spectui.session.options import ChatOptions, for_pair, pair_drafter_kind
from spectui.ui.chat_actions import ChatActions
from spectui.ui.chat_pane import ChatHost
from spectui.ui.chat_view import NoteMessage
from spectui.ui.commands import ChatCommands
from spectui.ui.controls import Controls
from spectui.ui.examples import ExampleOpenings
from spectui.ui.fit import Fitting
from spectui.ui.lifecycle import Lifecycle
from spectui.ui.messages import (
    BaselineMeasured,
    EngineFailed,
    GpuUnused,
    LoadProgress,
    LoadWarning,
    ModelsLoaded,
    PairReady,
)
from spectui.ui.pairs import LocalPairCommands, PairCommands
from spectui.ui.replies import Replies
from spectui.ui.stats_panel import StatsPanel
from spectui.ui.workers import EngineWorkers, close_models


class SpectuiApp(Lifecycle, Fitting, Controls, Replies, ChatActions, EngineWorkers):
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
        self.start_loading(self.pair.options)

    def on_unmount(self) -> None:
        self.save_streamed()  # whatever ended the app (a crash too): the reply on screen is kept
        self.remove_signal_handlers()
        self.replies.stop_requested.set()
        self.workers.cancel_all()
        close_models(self.pair.session)
        self.chat.store.close()
        self.cancel_watchdog()

    # ----- loading -------------------------------------------------------------------------

    def start_loading(self, options: ChatOptions) -> None:
        self.pair.ready = False
        self.pair.load_failed = False
        self.pair.baseline = None  # it belonged to the models unloaded now
        self.panel.start_measuring()
        self.pair.options = options
        self.pair.drafters = DrafterInfo()
        self.chat.mode = ""
        self.sub_title = self.subtitle(options)
        self.set_status(f"loading {options.models_label}…", 0.0)
        self.load_models(options)

    def on_load_progress(self, message: LoadProgress) -> None:
        self.set_status(message.label + "…", message.fraction)

    def on_gpu_unused(self, message: GpuUnused) -> None:
        self.panel.show_gpu_line(message.text)

    async def on_load_warning(self, message: LoadWarning) -> None:
        text = self.pair.options.renamed(message.text)
        self.notify(text, severity="warning", timeout=12)
        await self.note(text, "warning")

    async def on_models_loaded(self, message: ModelsLoaded) -> None:
        self.pair.drafters = message.drafters
        self.pair.recommended_sampling = message.sampling
        self.pair.loaded_mode = message.mode
        self.chat.mode = self.chat_mode(self.chat.conversation)
        self.sub_title = self.subtitle(self.pair.options)
        self.refresh_settings()
        self.pair.draft_same_model = message.draft_same_model
        self.refresh_k()
        for note in map(self.pair.options.renamed, message.drafters.notes):
            self.notify(note, severity="warning", timeout=12)
            await self.note(note, "warning")
        if message.mode == "plain-chat":
            self.notify(message.template_note, severity="warning")
            await self.note(message.template_note, "warning")
        await self.show_examples()

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

    async def on_baseline_measured(self, message: BaselineMeasured) -> None:
        calibration = message.calibration
        if calibration.baseline is not None:
            self.pair.baseline = calibration.baseline
        self.panel.measured(calibration.baseline,
                            calibration.describe(with_figures=self.pair.options.show_timings))
        self.pair.ready = True
        self.ready_status()
        if self.replies.queued is not None:
            await self.chat_pane.send_queued()

    async def on_pair_ready(self, message: PairReady) -> None:
        kind = pair_drafter_kind(message.drafter, self.pair.options.drafter.kind)
        options = for_pair(self.pair.options, message.name, message.target, message.draft, kind,
                           message.recommended_k)
        self.pair.draft_control = options.draft_control()
        await self.note(f"switched to pair {message.name}: {options.models_label}")
        self.start_loading(options)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        self.notify(message.text, severity="error", timeout=15)
        await self.note(message.text, "error")
        self.pair.reload_pending = self.pair.reload_pending or message.reload
        if message.during == "load":
            self.pair.load_failed = True
            self.panel.measured(None, None)
            again = "your next message loads it again, or " if message.reload else ""
            self.set_status(f"no model loaded: {again}pick a pair with ctrl+p", busy=False)
            await self.chat_pane.cancel_queued("no model could be loaded for the queued message")
        elif message.during == "pull":
            self.set_status("pull failed", busy=False)
        else:
            await self.chat_pane.end_reply()


if TYPE_CHECKING:
    def _hosts_the_chat_pane(app: SpectuiApp) -> ChatHost:
        """The type checker's proof that the app gives the chat pane all it asks for."""
        return app
