"""`SpectuiApp`: the chat log, the input, and the live speculation panel beside them.

The app owns the UI state; the workers (`spectui.ui.workers`) own every llama.cpp call and
report through messages handled here. Key actions live in `spectui.ui.controls`.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, Input, Label, ProgressBar
from textual.worker import WorkerFailed

from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.chat.template import ChatMessage
from spectui.engine.config import DraftControl
from spectui.engine.drafters.spec import DrafterInfo
from spectui.engine.events import Finished
from spectui.paths import chats_db_path
from spectui.session.baseline import Baseline, baseline_probe, from_finished
from spectui.session.loaded import EngineSession
from spectui.session.machine import LoadMeter
from spectui.session.options import ChatOptions, pair_drafter_kind
from spectui.ui import summary
from spectui.ui.chat_view import AssistantMessage, ChatLog, Comparison, NoteMessage, UserMessage
from spectui.ui.controls import Controls
from spectui.ui.examples import ExampleOpenings
from spectui.ui.messages import (
    BaselineMeasured,
    EngineFailed,
    LoadProgress,
    LoadWarning,
    ModelsLoaded,
    PairReady,
    ReplyFinished,
    ReplyPurpose,
    ReplyUpdate,
)
from spectui.ui.pairs import LocalPairCommands, PairCommands
from spectui.ui.stats_panel import StatsPanel, describe_drafter, describe_k, low_acceptance_advice, same_model
from spectui.ui.workers import EngineWorkers


class SpectuiApp(Controls, EngineWorkers, App[int]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "spectui"
    COMMANDS = App.COMMANDS | {PairCommands, LocalPairCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f2", "k_down", "K-"),
        Binding("f3", "k_up", "K+"),
        Binding("f4", "toggle_speculation", "Spec on/off"),
        Binding("f5", "compare", "Re-run K=0"),
        Binding("f6", "toggle_colours", "Colours"),
        Binding("f7", "next_drafter", "Drafter"),
        Binding("f8", "examples", "Examples", show=False),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+o", "open_chats", "Chats"),
        Binding("ctrl+p", "command_palette", "Pairs & commands", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit"),
    ]

    def __init__(self, options: ChatOptions, store_path: Path | None = None) -> None:
        super().__init__()
        self.options = options
        self.session = EngineSession()
        self.stop_requested = threading.Event()
        self.draft_control = options.draft_control()
        self.store = SafeStore(store_path or chats_db_path())
        self.conversation = Conversation(self.store, options.pair_name, options.system)
        self.drafters = DrafterInfo()
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
        """How prompts are made for the loaded model: `chat`, `completion` or `plain-chat`."""
        self.load_meter = LoadMeter()
        """Other programs' CPU use, to tell when the baseline no longer compares."""
        self.reply_widget: AssistantMessage | None = None
        self.comparison: Comparison | None = None
        self.last_cycle_k: int | None = None
        self.after_idle: Callable[[], Awaitable[None]] | None = None

    # ----- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                with Horizontal(id="status-bar"):
                    yield Label("", id="status")
                    yield ProgressBar(id="load-progress", show_eta=False)
                yield ChatLog(id="log")
                yield Input(placeholder="Message (Enter to send)", id="prompt")
            yield StatsPanel(show_timings=self.options.show_timings, id="stats")
        yield Footer()

    async def on_mount(self) -> None:
        self.store.attach(self.store_notice)
        self.sub_title = self.subtitle(self.options)
        self.refresh_k()
        if self.options.resume:
            await self.resume_last_chat()
        self.query_one("#prompt", Input).focus()
        if self.options.notice:
            await self.note(self.options.notice)
        self.start_loading(self.options)

    def on_unmount(self) -> None:
        self.stop_requested.set()
        self.workers.cancel_all()
        self.session.close(timeout=5.0)
        self.store.close()

    @property
    def log_view(self) -> ChatLog:
        return self.query_one("#log", ChatLog)

    @property
    def panel(self) -> StatsPanel:
        return self.query_one("#stats", StatsPanel)

    def set_status(self, text: str, fraction: float | None = None, *, busy: bool = True) -> None:
        self.query_one("#status", Label).update(text)
        bar = self.query_one("#load-progress", ProgressBar)
        bar.display = busy
        bar.update(total=None if fraction is None else 1.0, progress=fraction or 0.0)

    def refresh_k(self) -> None:
        state = self.panel.state
        state.k_label = describe_k(self.draft_control, self.drafters, self.last_cycle_k)
        state.drafter_label = describe_drafter(self.draft_control, self.drafters)
        self.panel.show()

    async def note(self, text: str, kind: str = "info") -> None:
        await self.log_view.add(NoteMessage(text, kind))

    def store_notice(self, line: str, severity: str) -> None:
        """A line from the chat store (damaged, unsaved, a failed write): toast + full note."""
        self.notify(line, severity="error" if severity == "error" else "warning", timeout=15)
        self.call_later(self.note, line, "error" if severity == "error" else "warning")
        self.sub_title = self.subtitle(self.options)

    def subtitle(self, options: ChatOptions) -> str:
        """The header's second line: the mode (once known), the models, whether chats are saved."""
        saving = "" if self.store.saving else "chats not saved"
        return " · ".join(part for part in (self.mode, options.models_label, saving) if part)

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

    async def on_load_warning(self, message: LoadWarning) -> None:
        self.notify(message.text, severity="warning", timeout=12)
        await self.note(message.text, "warning")

    async def on_models_loaded(self, message: ModelsLoaded) -> None:
        self.drafters = message.drafters
        self.mode = message.mode
        self.conversation.mode = message.mode
        self.sub_title = self.subtitle(self.options)
        generator = self.session.generator
        draft = generator.drafters.get("model") if generator is not None else None
        self.draft_same_model = draft is not None and same_model(generator.target, draft.model)
        self.refresh_k()
        for note in message.drafters.notes:
            self.notify(note, severity="warning", timeout=12)
            await self.note(note, "warning")
        if message.mode == "plain-chat":
            self.notify(message.template_note, severity="warning")
            await self.note(message.template_note, "warning")
        await self.show_examples()

    async def show_examples(self) -> None:
        """In completion mode, on an empty chat: say what a base model does, offer openings."""
        for old in self.query(ExampleOpenings):
            await old.remove()
        if self.mode == "completion" and not self.conversation.messages:
            await self.log_view.add(ExampleOpenings(id="examples"))

    def action_examples(self) -> None:
        examples = self.query(ExampleOpenings)
        if examples:
            examples.first().focus_next_example()
        else:
            self.notify("example openings are offered for a base model (completion mode) on a new chat")

    async def on_example_openings_picked(self, message: ExampleOpenings.Picked) -> None:
        await self.submit(message.text)

    def on_baseline_measured(self, message: BaselineMeasured) -> None:
        self.panel.state.measuring = False
        calibration = message.calibration
        if calibration.baseline is not None:
            self.set_baseline(calibration.baseline)
        self.panel.state.warm_note = calibration.describe(with_figures=self.options.show_timings)
        self.panel.show()
        self.ready = True
        self.set_status(f"ready · {self.options.models_label}", busy=False)

    def set_baseline(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self.panel.state.baseline = baseline
        self.panel.show()

    async def on_pair_ready(self, message: PairReady) -> None:
        k = message.recommended_k if message.recommended_k is not None else self.options.k
        kind = pair_drafter_kind(message.drafter, self.options.drafter.kind)
        drafter = replace(self.options.drafter, kind=kind, draft=message.draft)
        options = replace(self.options, pair_name=message.name, target=message.target,
                          drafter=drafter, k=k)
        self.draft_control = options.draft_control()
        self.conversation.pair = message.name
        await self.note(f"switched to pair {message.name}: {options.models_label}")
        self.start_loading(options)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        self.notify(message.text, severity="error", timeout=15)
        await self.note(message.text, "error")
        if message.during == "load":
            self.load_failed = True
            self.panel.state.measuring = False
            self.panel.show()
            self.set_status("no model loaded: pick a pair with ctrl+p", busy=False)
        elif message.during == "pull":
            self.set_status("pull failed", busy=False)
        else:
            await self.end_reply()

    # ----- replies -------------------------------------------------------------------------

    @on(Input.Submitted, "#prompt")
    async def send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text and await self.submit(text):
            event.input.clear()

    async def submit(self, text: str) -> bool:
        """Send `text` as the user's next message; False when no reply can start now."""
        if not self.can_generate():
            return False
        for examples in self.query(ExampleOpenings):
            await examples.remove()
        self.query_one("#prompt", Input).focus()
        self.conversation.add_user(text)
        await self.log_view.add(UserMessage(text))
        title = "continuation" if self.mode == "completion" else "assistant"
        self.reply_widget = AssistantMessage(title=title, streaming=True)
        await self.log_view.add(self.reply_widget)
        self.reply_widget.set_colouring(self.colouring)
        self.conversation.start_reply()
        self.panel.start_reply()
        self.begin_generation("reply", self.conversation.prompt_messages(), self.draft_control)
        return True

    def can_generate(self) -> bool:
        if self.load_failed:
            self.notify("no model is loaded (the error above says why): pick a pair with ctrl+p, "
                        "or restart with --target/--draft", severity="warning")
            return False
        if not self.ready:
            self.notify("the models are still loading; one moment")
            return False
        if self.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return False
        return True

    def begin_generation(self, purpose: ReplyPurpose, messages: list[ChatMessage],
                         control: DraftControl) -> None:
        self.busy = purpose
        self.stop_requested.clear()
        self.set_status("generating… (Escape stops)", None)
        probe = baseline_probe(self.baseline, self.load_meter.others()) if purpose == "reply" else 0
        config = self.options.generation_config(self.mode == "completion", probe if control.enabled else 0)
        self.generate_reply(messages, config, control, purpose)

    def _target_widget(self, purpose: ReplyPurpose) -> AssistantMessage | None:
        if purpose == "compare":
            return self.comparison.right if self.comparison else None
        return self.reply_widget

    async def on_reply_update(self, message: ReplyUpdate) -> None:
        widget = self._target_widget(message.purpose)
        if widget is not None:
            await widget.append(message.pieces)
        if message.purpose != "reply":
            return
        state = self.panel.state
        state.cycles.extend(message.cycles)
        state.totals = message.totals or state.totals
        if message.cycles:
            self.last_cycle_k = message.cycles[-1].k
            state.k_label = describe_k(self.draft_control, self.drafters, self.last_cycle_k)
        self.panel.show()
        if widget is not None:
            self.conversation.save_partial(widget.text)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        finished = message.finished
        k_label = "0" if message.purpose == "compare" else describe_k(
            self.draft_control, self.drafters, self.last_cycle_k
        )
        stats = summary.reply_stats(finished, k_label)
        if message.speculation_off or finished.stats.probe_tokens:
            source = ("side-by-side re-run" if message.purpose == "compare" else
                      "reply with speculation off" if message.speculation_off else "probe at this reply's start")
            if (fresh := from_finished(finished, source, self.load_meter.others())) is not None:
                self.set_baseline(fresh)
        if message.purpose == "compare":
            await self._finish_comparison(finished, stats)
        else:
            await self._finish_reply(finished, stats)
        if finished.reason in ("context", "worker"):
            self.notify(finished.message, severity="error", timeout=15)
            await self.note(finished.message, "error")
        await self.end_reply()

    async def _finish_reply(self, finished: Finished, stats: dict) -> None:
        widget = self.reply_widget
        text = widget.text if widget else finished.text
        if widget is not None:
            await widget.finish(stats, summary.meta_line(stats, self.options.show_timings))
        self.conversation.finish_reply(text, stats)
        self.panel.state.totals = finished.stats
        advice = low_acceptance_advice(finished.stats, self.panel.state.k_label, self.draft_same_model)
        self.panel.state.notes = [advice] if advice else []
        self.panel.show()
        if advice:
            self.notify(advice, severity="warning", timeout=10)

    async def _finish_comparison(self, finished: Finished, stats: dict) -> None:
        comparison = self.comparison
        if comparison is None:
            return
        await comparison.right.finish(stats, summary.meta_line(stats, self.options.show_timings))
        same = comparison.left.text == comparison.right.text
        comparison.set_verdict(
            summary.comparison_verdict(comparison.left.stats, finished, same, self.options.show_timings)
        )

    async def end_reply(self) -> None:
        """Back to idle after a reply, a comparison or a failure."""
        widget = self.reply_widget
        if self.busy == "reply" and widget is not None and widget.streaming:  # failed mid-reply
            await widget.finish({"reason": "error"}, "failed")
            self.conversation.finish_reply(widget.text, {"reason": "error"})
        if self.busy == "compare" and self.comparison and self.comparison.right.streaming:
            await self.comparison.right.finish({"reason": "error"}, "failed")
        self.busy = None
        self.reply_widget = None
        if self.ready:
            self.set_status(f"ready · {self.options.models_label}", busy=False)
        if self.after_idle is not None:
            callback, self.after_idle = self.after_idle, None
            await callback()

    # ----- chats ---------------------------------------------------------------------------

    async def show_conversation(self, conversation: Conversation) -> None:
        """Replace the log with a stored conversation (resume, or picked from the list)."""
        self.conversation = conversation
        log = self.log_view
        await log.remove_children()
        if conversation.system:
            await self.note(f"system prompt: {conversation.system}")
        for stored in conversation.stored:
            if stored.role == "user":
                await log.add(UserMessage(stored.content))
            elif stored.role == "assistant":
                meta = summary.meta_line(stored.stats, self.options.show_timings)
                meta = meta if stored.complete else "interrupted (saved before it finished)"
                widget = AssistantMessage(stored.content, meta=meta, stats=stored.stats)
                await log.add(widget)
                widget.set_colouring(self.colouring)

    async def resume_last_chat(self) -> None:
        chat_id = self.store.last_chat_id()
        if chat_id is None:
            await self.note("no saved chat to resume: this is a new one")
            return
        await self.show_conversation(Conversation.open(self.store, chat_id))
        self.conversation.pair = self.options.pair_name
