"""`AppCore`: what the app is built on — its state, by owner (`spectui.ui.state`), the widgets
it talks to, and the helpers its parts call (notes, toasts, the subtitle, the status line, the
panel's K line). `SpectuiApp` (`spectui.ui.app`) subclasses it with the layout, and holds its
parts `Lifecycle` (`lifecycle`) and `Fitting` (`fit`), which are given an `AppCore`; the pair and
its workers are the `EngineHost` widget's (`spectui.ui.engine_host`), the chat and its keys the
`ChatPane`'s (`spectui.ui.chat_pane`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.notifications import SeverityLevel
from textual.worker import WorkerFailed

from spectui import safe_text
from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.paths import chats_db_path
from spectui.session.options import ChatOptions
from spectui.ui.chat_pane import ChatPane
from spectui.ui.engine_host import EngineHost
from spectui.ui.prompt import PromptInput
from spectui.ui.state import ChatState, PairState, QuitState, ReplyState
from spectui.ui.stats_panel import StatsPanel
from spectui.ui.status_line import StatusLine


class AppCore(App[int]):
    """The state every part of the app reads, each group written by its owner (see `state`): the
    app holds `quit_state` (its `Lifecycle` writes it), its engine host `pair`, its chat pane
    `chat` and `replies`."""

    engine_class: ClassVar[type[EngineHost]] = EngineHost
    """The engine host the app is built with (tests hold a load or record requests with their own)."""
    pane_class: ClassVar[type[ChatPane]] = ChatPane
    """The chat pane the app is built with (tests record or hold a reply's messages with their own)."""

    def __init__(self, options: ChatOptions, store_path: Path | None = None) -> None:
        super().__init__()
        self.engine = self.engine_class(PairState(options, options.draft_control()), id="engine")
        """The pair of models, the engine workers and what they report (never shown)."""
        store = SafeStore(store_path or chats_db_path())
        conversation = Conversation(store, options.pair_name, options.system, options.chat_settings())
        self.chat_pane = self.pane_class(ChatState(store, conversation), id="chat-column")
        """The status line, the chat log and the message box, and the state of what they show."""
        self.quit_state = QuitState()
        """How the app ends."""

    @property
    def pair(self) -> PairState:
        """The pair of models, loading or loaded (the engine host's: read here, changed there)."""
        return self.engine.pair

    @property
    def chat(self) -> ChatState:
        """The chat on screen and its store (the chat pane's)."""
        return self.chat_pane.chat

    @property
    def replies(self) -> ReplyState:
        """The reply in progress, the queued message, the edit (the chat pane's)."""
        return self.chat_pane.replies

    # ----- the widgets every part talks to -------------------------------------------------------

    @property
    def panel(self) -> StatsPanel:
        return self.query_one("#stats", StatsPanel)

    @property
    def prompt(self) -> PromptInput:
        return self.chat_pane.prompt

    @property
    def status_line(self) -> StatusLine:
        return self.chat_pane.status_line

    def set_status(self, text: str, fraction: float | None = None, *, busy: bool = True) -> None:
        self.chat_pane.set_status(text, fraction, busy=busy)

    def refresh_k(self) -> None:
        self.panel.show_k(self.pair.draft_control, self.pair.drafters, self.replies.last_cycle_k,
                          self.pair.options.renamed)

    # ----- notes and toasts --------------------------------------------------------------------

    async def note(self, text: str, kind: str = "info") -> None:
        await self.chat_pane.note(text, kind)

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
        self.refresh_subtitle()

    def refresh_subtitle(self) -> None:
        self.sub_title = self.subtitle(self.pair.options)

    def subtitle(self, options: ChatOptions) -> str:
        """The header's second line: the mode (once known), the models, whether chats are saved."""
        saving = "" if self.chat.store.saving else "chats not saved"
        return safe_text.line(" · ".join(part for part in (self.chat.mode, options.models_label, saving) if part))

    def _handle_exception(self, error: Exception) -> None:
        """An unexpected exception (a handler's error, a worker's raise) ends the app with exit
        code 1 and one line naming a log of the traceback, instead of Textual's traceback dump."""
        from spectui.crashlog import report

        cause = error.error if isinstance(error, WorkerFailed) else error
        if self.quit_state.crash_line is None:
            self.quit_state.crash_line = report(cause, "running the chat app")
        super()._handle_exception(error)  # return code 1, remembered for tests, the app closes
        self._exit_renderables.clear()  # the traceback is in the log, not on the terminal
