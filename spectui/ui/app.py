"""`SpectuiApp`: the chat log, the message box, and the live speculation panel beside them.

The app owns the UI state and the loading of models; the workers (`spectui.ui.workers`) own every
llama.cpp call and report through messages. Its mixins: `controls` (speculation keys, chats),
`replies` (sending, queueing, editing, regenerating, streaming replies), `chat_actions` (resume,
settings, thinking, copy, export), `lifecycle` (quitting without losing the reply, signals,
loading the pair again after a fault), `fit` (any terminal size down to 20x6).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.widgets import Footer, Header, Label, ProgressBar
from textual.worker import WorkerFailed

from spectui import safe_text
from spectui.catalog.demo import welcome
from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.engine.config import RecommendedSampling
from spectui.engine.drafters.spec import DrafterInfo
from spectui.paths import chats_db_path
from spectui.session.baseline import Baseline
from spectui.session.figures import describe_k
from spectui.session.loaded import EngineSession
from spectui.session.machine import LoadMeter
from spectui.session.options import ChatOptions, for_pair, pair_drafter_kind
from spectui.ui.chat_actions import ChatActions
from spectui.ui.chat_view import AssistantMessage, ChatLog, Comparison, NoteMessage, UserMessage
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
    ReplyPurpose,
)
from spectui.ui.pairs import LocalPairCommands, PairCommands
from spectui.ui.prompt import PromptInput
from spectui.ui.replies import Replies
from spectui.ui.stats_panel import StatsPanel, describe_drafter
from spectui.ui.workers import EngineWorkers, close_models

QUEUED = "1 message queued (Escape cancels)"


class SpectuiApp(Lifecycle, Fitting, Controls, Replies, ChatActions, EngineWorkers, App[int]):
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

    def __init__(self, options: ChatOptions, store_path: Path | None = None) -> None:
        super().__init__()
        self.options = options
        self.session = EngineSession()
        self.stop_requested = threading.Event()
        self.draft_control = options.draft_control()
        self.store = SafeStore(store_path or chats_db_path())
        self.conversation = Conversation(self.store, options.pair_name, options.system, options.chat_settings())
        self.drafters = DrafterInfo()
        self.recommended_sampling: RecommendedSampling | None = None
        """Where the chat's sampling starts with the loaded models (None until they load)."""
        """What the loaded generator offers (empty until the models are loaded)."""
        self.ready = False
        self.load_failed = False
        self.draft_same_model = False
        """The draft is the target's model at another precision (changes the low-acceptance advice)."""
        self.crash_line: str | None = None
        """Set when an unexpected exception ended the app: the one line `spectui chat` prints."""
        self.busy: ReplyPurpose | None = None
        self.colouring = False
        self.baseline: Baseline | None = None
        self.mode = ""
        """How prompts are made for this chat with the loaded model: `chat`, `completion` or `plain-chat`."""
        self.loaded_mode = ""
        """The loaded model's own mode (from its template and `--mode`): a new chat's."""
        self.load_meter = LoadMeter()
        """Other programs' CPU use, to tell when the baseline no longer compares."""
        self.reply_widget: AssistantMessage | None = None
        self.comparison: Comparison | None = None
        self.last_cycle_k: int | None = None
        self.after_idle: Callable[[], Awaitable[None]] | None = None
        self.queued: UserMessage | None = None
        """A message typed while the models load, sent once they are ready."""
        self.editing: int | None = None
        """The turn being edited in the message box (Enter resends it in its place)."""
        self.export_dir: Path | None = None
        """Where the app writes exports (None: the current directory)."""
        self._status: tuple[str, float | None, bool] = ("", None, True)
        """The status line as last set (text, progress, busy), to add or drop "queued" to it."""
        self.quitting: int | None = None
        """The exit code once a quit was asked for (the reply in progress is being saved)."""
        self.quit_line: str | None = None
        """What `spectui chat` says when the app ended on a signal."""
        self.reload_pending = False
        """A fault left the models unusable: the next message loads them again first."""
        self.watchdog: threading.Timer | None = None
        self.removed_noted: set[str] = set()
        """Loaded model files already said to be gone from disk."""

    # ----- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                with Horizontal(id="status-bar"):
                    yield Label("", id="status")
                    yield ProgressBar(id="load-progress", show_eta=False)
                yield ChatLog(id="log")
                yield PromptInput(id="prompt")
            yield StatsPanel(show_timings=self.options.show_timings, id="stats")
        yield Footer()

    async def on_mount(self) -> None:
        self.store.attach(self.store_notice)
        self.sub_title = self.subtitle(self.options)
        self.refresh_k()
        if self.options.resume:
            await self.resume_last_chat()
        self.refresh_settings()
        self.prompt.focus()
        if self.options.notice:
            await self.note(self.options.notice)
        self.install_signal_handlers()
        self.fit_to(self.size.width, self.size.height)
        self.start_loading(self.options)

    def on_unmount(self) -> None:
        self.save_streamed()  # whatever ended the app (a crash too): the reply on screen is kept
        self.remove_signal_handlers()
        self.stop_requested.set()
        self.workers.cancel_all()
        close_models(self.session)
        self.store.close()
        self.cancel_watchdog()

    @property
    def log_view(self) -> ChatLog:
        return self.query_one("#log", ChatLog)

    @property
    def panel(self) -> StatsPanel:
        return self.query_one("#stats", StatsPanel)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    def set_status(self, text: str, fraction: float | None = None, *, busy: bool = True) -> None:
        self._status = (text, fraction, busy)
        queued = f" · {QUEUED}" if self.queued is not None else ""
        self.query_one("#status", Label).update(safe_text.content(text + queued))
        bar = self.query_one("#load-progress", ProgressBar)
        bar.display = busy and self.progress_fits()
        bar.update(total=None if fraction is None else 1.0, progress=fraction or 0.0)

    def refresh_status(self) -> None:
        text, fraction, busy = self._status
        self.set_status(text, fraction, busy=busy)

    def ready_status(self) -> None:
        if self.ready and self.busy is None:
            self.set_status(f"ready · {self.options.models_label}", busy=False)

    def refresh_k(self) -> None:
        state = self.panel.state
        state.k_label = describe_k(self.draft_control, self.drafters, self.last_cycle_k)
        state.drafter_label = self.options.renamed(describe_drafter(self.draft_control, self.drafters))
        self.panel.show()

    async def note(self, text: str, kind: str = "info") -> None:
        await self.log_view.add(NoteMessage(text, kind))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast, terminal-safe and never read as markup: toasts quote names, paths and
        errors from outside (a model named `[bold red]x` shows those characters)."""
        super().notify(safe_text.block(message), title=safe_text.line(title), severity=severity,
                       timeout=timeout, markup=False)

    def store_notice(self, line: str, severity: str) -> None:
        """A line from the chat store (damaged, unsaved, a failed write): toast + full note."""
        self.notify(line, severity="error" if severity == "error" else "warning", timeout=15)
        self.call_later(self.note, line, "error" if severity == "error" else "warning")
        self.sub_title = self.subtitle(self.options)

    def subtitle(self, options: ChatOptions) -> str:
        """The header's second line: the mode (once known), the models, whether chats are saved."""
        saving = "" if self.store.saving else "chats not saved"
        return safe_text.line(" · ".join(part for part in (self.mode, options.models_label, saving) if part))

    def _handle_exception(self, error: Exception) -> None:
        """An unexpected exception (a handler's error, a worker's raise) ends the app with exit
        code 1 and one line naming a log of the traceback, instead of Textual's traceback dump."""
        from spectui.crashlog import report

        cause = error.error if isinstance(error, WorkerFailed) else error
        if self.crash_line is None:
            self.crash_line = report(cause, "running the chat app")
        super()._handle_exception(error)  # return code 1, remembered for tests, the app closes
        self._exit_renderables.clear()  # the traceback is in the log, not on the terminal

    # ----- loading -------------------------------------------------------------------------

    def start_loading(self, options: ChatOptions) -> None:
        self.ready = False
        self.load_failed = False
        self.panel.state.measuring = True
        self.panel.state.baseline = self.baseline = None  # it belonged to the models unloaded now
        self.panel.show()
        self.options = options
        self.drafters = DrafterInfo()
        self.mode = ""
        self.sub_title = self.subtitle(options)
        self.set_status(f"loading {options.models_label}…", 0.0)
        self.load_models(options)

    def on_load_progress(self, message: LoadProgress) -> None:
        self.set_status(message.label + "…", message.fraction)

    def on_gpu_unused(self, message: GpuUnused) -> None:
        self.panel.state.gpu_line = message.text
        self.panel.show()

    async def on_load_warning(self, message: LoadWarning) -> None:
        text = self.options.renamed(message.text)
        self.notify(text, severity="warning", timeout=12)
        await self.note(text, "warning")

    async def on_models_loaded(self, message: ModelsLoaded) -> None:
        self.drafters = message.drafters
        self.recommended_sampling = message.sampling
        self.loaded_mode = message.mode
        self.mode = self.chat_mode(self.conversation)
        self.sub_title = self.subtitle(self.options)
        self.refresh_settings()
        self.draft_same_model = message.draft_same_model
        self.refresh_k()
        for note in map(self.options.renamed, message.drafters.notes):
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
        if self.conversation.messages:
            return
        if line := welcome(self.options.pair_name):
            await self.log_view.add(NoteMessage(line, "info welcome"))
        if self.mode == "completion":
            await self.log_view.add(ExampleOpenings(id="examples"))

    def action_examples(self) -> None:
        examples = self.query(ExampleOpenings)
        if examples:
            examples.first().focus_next_example()
        else:
            self.notify("example openings are offered for a base model (completion mode) on a new chat")

    async def on_example_openings_picked(self, message: ExampleOpenings.Picked) -> None:
        await self.submit(message.text)

    async def on_baseline_measured(self, message: BaselineMeasured) -> None:
        self.panel.state.measuring = False
        calibration = message.calibration
        if calibration.baseline is not None:
            self.set_baseline(calibration.baseline)
        self.panel.state.warm_note = calibration.describe(with_figures=self.options.show_timings)
        self.panel.show()
        self.ready = True
        self.ready_status()
        if self.queued is not None:
            await self.send_queued()

    def set_baseline(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self.panel.state.baseline = baseline
        self.panel.show()

    async def on_pair_ready(self, message: PairReady) -> None:
        kind = pair_drafter_kind(message.drafter, self.options.drafter.kind)
        options = for_pair(self.options, message.name, message.target, message.draft, kind,
                           message.recommended_k)
        self.draft_control = options.draft_control()
        await self.note(f"switched to pair {message.name}: {options.models_label}")
        self.start_loading(options)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        self.notify(message.text, severity="error", timeout=15)
        await self.note(message.text, "error")
        self.reload_pending = self.reload_pending or message.reload
        if message.during == "load":
            self.load_failed = True
            self.panel.state.measuring = False
            self.panel.show()
            again = "your next message loads it again, or " if message.reload else ""
            self.set_status(f"no model loaded: {again}pick a pair with ctrl+p", busy=False)
            await self.cancel_queued("no model could be loaded for the queued message")
        elif message.during == "pull":
            self.set_status("pull failed", busy=False)
        else:
            await self.end_reply()
