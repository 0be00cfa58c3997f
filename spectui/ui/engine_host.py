"""`EngineHost` (`#engine`, never shown): the pair of models (`PairState`), and every engine
worker — each one of `EngineSession`'s methods (`spectui.session.loaded`) run on a Textual thread
worker: the load (with its calibration), a reply, the health check of loaded models; and a
pair's pull.

The workers never touch a widget or the app's state: they post typed messages
(`spectui.ui.messages`). The loading messages (`LoadProgress` … `EngineFailed`) come back here,
and the host tells the rest through `EngineClient` (what it asks of the app: the panel, notes and
toasts) and `ReplyPane` (the few things it asks of the chat pane). A reply's messages, its
failure included (`ReplyFailed`, after its last pieces), are posted straight to the chat pane,
which handles them itself. The workers run on this one node, so `exclusive=True,
group="engine"` keeps a load and a reply from running together. The other parts read `pair`
(`app.pair`) and change it only through the methods here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol, cast

from textual import work
from textual.notifications import SeverityLevel
from textual.widget import Widget
from textual.worker import Worker, get_current_worker

from spectui import faults
from spectui.engine.drafters.spec import DrafterInfo, HistorySource
from spectui.errors import LoadCancelled, SpectuiError
from spectui.session.baseline import Baseline
from spectui.session.history import store_history
from spectui.session.options import ChatOptions, for_pair, pair_drafter_kind
from spectui.session.pair_load import LoadedHealth, LoadPlan, LoadReport, LoadSpec
from spectui.session.reply import ReplyRequest
from spectui.ui.messages import (
    BaselineMeasured,
    EngineFailed,
    GpuUnused,
    LoadProgress,
    LoadWarning,
    ModelsLoaded,
    PairReady,
    ReplyFailed,
    ReplyPurpose,
)
from spectui.ui.state import ChatState, PairState
from spectui.ui.worker_reports import UPDATE_INTERVAL, ReplyBatcher, Throttle, UpdatePace, tqdm_posting, unexpected

CLOSE_WAIT = 5.0
"""Seconds the app, ending, waits for a reply thread to let go of the models before freeing them."""

if TYPE_CHECKING:
    from textual.message import Message

    from spectui.ui.stats_panel import StatsPanel


class ReplyPane(Protocol):
    """What the engine host asks of the chat pane (`ChatPane`; checked where `SpectuiApp` joins
    them): where a reply worker posts and the stop it reads, the status line while loading, and
    the pane's turn once the models are ready or could not be loaded."""

    @property
    def stop_requested(self) -> threading.Event: ...
    def post_message(self, message: Message) -> bool: ...
    def set_status(self, text: str, fraction: float | None = None, *, busy: bool = True) -> None: ...
    async def models_ready(self) -> None:
        """The models are loaded and measured: ready, and the queued message sent."""
    async def cancel_queued(self, reason: str = ...) -> bool: ...
    async def show_examples(self) -> None:
        """On an empty chat with the models loaded: the demo pair's welcome, the openings."""


class EngineClient(Protocol):
    """What the engine host asks of the app it is in (`SpectuiApp`)."""

    @property
    def chat(self) -> ChatState: ...
    @property
    def chat_pane(self) -> ReplyPane: ...
    @property
    def panel(self) -> StatsPanel: ...
    async def note(self, text: str, kind: str = "info") -> None: ...
    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None: ...
    def refresh_k(self) -> None: ...
    def show_models(self, loaded: bool) -> None:
        """The pair changed (a load started, or the models loaded): the chat's mode, the header."""


class EngineHost(Widget):
    """Owns `pair` and runs every engine worker; handles what the loading workers post."""

    DEFAULT_CSS: ClassVar[str] = "EngineHost { display: none; }"

    update_interval: float = UPDATE_INTERVAL
    """Seconds between batched reply updates (tests set 0 to see every event)."""

    def __init__(self, pair: PairState, *, id: str) -> None:
        super().__init__(id=id)
        self.pair = pair
        self.pace = UpdatePace()
        """How often a reply's batches come, slowed while drawing them costs the model its core."""

    @property
    def client(self) -> EngineClient:
        return cast(EngineClient, self.app)

    # ----- what the other parts ask -----------------------------------------------------------

    def start_loading(self, options: ChatOptions) -> None:
        """Load `options`' pair (in place of the one loaded), saying so as it goes."""
        self.pair.ready = False
        self.pair.load_failed = False
        self.pair.baseline = None  # it belonged to the models unloaded now
        self.client.panel.start_measuring()
        self.pair.options = options
        self.pair.drafters = DrafterInfo()
        self.client.show_models(loaded=False)
        self.client.chat_pane.set_status(f"loading {options.models_label}…", 0.0)
        self.load_models(options)

    def use_options(self, options: ChatOptions) -> None:
        """The options a resumed chat was recorded with (loaded next)."""
        self.pair.options, self.pair.draft_control = options, options.draft_control()

    def open_pair(self, name: str, pulled: bool) -> None:
        """Resolve a pulled pair or pull one; it is loaded once ready (`on_pair_ready`)."""
        self.pair.ready = False
        self.prepare_pair(name, pulled)

    # ----- the speculation keys (bound on the chat pane): the shared draft control, in place ------

    def step_k(self, delta: int) -> None:
        """F2/F3: K one step down or up, from the reply's next cycle (`DraftControl.step`)."""
        if not self.pair.drafters.can_speculate:
            self.notify(f"no drafter is running: K has no effect ({no_drafter_reason(self.pair.drafters)})")
            return
        k = self.pair.draft_control.step(delta)
        self.client.refresh_k()
        off = "" if self.pair.draft_control.enabled else " (speculation is off: F4 turns it on)"
        self.notify(f"draft length K = {k}, from the next cycle{off}", timeout=2)

    def toggle_speculation(self) -> None:
        """F4: speculation off or on again, from the next cycle."""
        if not self.pair.drafters.can_speculate:
            self.notify(f"speculation is off: {no_drafter_reason(self.pair.drafters)}")
            return
        enabled = self.pair.draft_control.toggle()
        self.client.refresh_k()
        self.notify(f"speculation {'on' if enabled else 'off'}", timeout=2)

    def next_drafter(self) -> None:
        """F7: the next of the drafters the loaded models offer, from the next cycle."""
        drafters = self.pair.drafters
        kinds = drafters.kinds
        if len(kinds) < 2:
            only = drafters.label(None)
            self.notify(f"only one drafter is available ({only})" if kinds else
                        f"no drafter is running ({no_drafter_reason(drafters)})")
            return
        current = self.pair.draft_control.drafter or drafters.default
        kind = kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else kinds[0]
        self.pair.draft_control.set_drafter(kind)
        self.client.refresh_k()
        self.notify(f"drafter: {drafters.label(kind)}, from the next cycle", timeout=2)

    # ----- what a reply or a check learns ----------------------------------------------------------

    def set_baseline(self, measured: Baseline) -> None:
        """A baseline measured for the loaded pair (after load, or by a reply that measured one)."""
        self.pair.baseline = measured
        self.client.panel.show_baseline(measured)

    def set_reload_pending(self, pending: bool) -> None:
        """Whether the next message loads the models again first (a fault said so, or no longer)."""
        self.pair.reload_pending = pending

    def newly_removed(self, removed: tuple[str, ...]) -> list[str]:
        """The loaded files gone from disk not said before (each is said once)."""
        names = sorted(set(removed) - self.pair.removed_noted)
        self.pair.removed_noted.update(names)
        return names

    def free_models(self, timeout: float = CLOSE_WAIT) -> bool:
        """Free the loaded models as the app ends, on a thread of its own (llama.cpp's frees are
        engine calls), waiting up to `timeout` for a reply thread to let go of them and as long
        again for the frees; False when they were not freed in time (the process ends anyway)."""
        session = self.pair.session
        freed: list[bool] = []
        closer = threading.Thread(target=lambda: freed.append(session.close(timeout)), name="spectui-close",
                                  daemon=True)
        closer.start()
        closer.join(2 * timeout)
        return freed == [True]

    # ----- the workers: the session's methods, on threads -------------------------------------

    def load_models(self, options: ChatOptions) -> None:
        """Load the models in a worker. The past chats the suffix drafter learns from are read
        here, on the UI thread, which owns the chat store's SQLite connection."""
        self._load_worker(options, store_history(self.client.chat.store))

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _load_worker(self, options: ChatOptions, history: HistorySource) -> None:
        worker = get_current_worker()
        try:
            plan = self._memory_plan(LoadSpec.of_chat(options, history))
            for warning in plan.warnings:
                self.post_message(LoadWarning(warning))
            if plan.memory.gpu_header:
                self.post_message(GpuUnused(plan.memory.gpu_header))
            if plan.threads_note:
                self.post_message(LoadWarning(plan.threads_note))
            self._load_locked(options, plan, lambda: worker.is_cancelled)
        except LoadCancelled:
            return  # quitting or switching pairs: nothing to report
        except SpectuiError as error:
            fault = faults.of_error(error, "app")
            self.post_message(EngineFailed(fault.line, "load", fault.reload))
        except Exception as error:  # a bug, but the UI must not wait forever: say so, log the trace
            self.post_message(EngineFailed(unexpected(error, "loading the models"), "load"))

    def _memory_plan(self, spec: LoadSpec) -> LoadPlan:
        """The worker's first step (`EngineSession.plan`): the memory plan and the threads."""
        return self.pair.session.plan(spec)

    def _load_locked(self, options: ChatOptions, plan: LoadPlan, cancelled: Callable[[], bool]) -> None:
        """The worker's second step (`EngineSession.load`, under the session's lock): the models
        loaded, installed and calibrated, each stage posted."""
        report = LoadReport(
            progress=Throttle(self.post_message, f"loading {options.models_label}", cancelled=cancelled),
            loaded=lambda pair: self.post_message(ModelsLoaded(pair)),
            calibrating=lambda: self.post_message(
                LoadProgress("warming up and measuring the speculation-off baseline", None)),
        )
        pair = self.pair.session.load(plan, report, cancelled)
        if pair is not None and pair.calibration is not None:
            self.post_message(BaselineMeasured(pair.calibration))

    def generate_reply(self, request: ReplyRequest, purpose: ReplyPurpose) -> ReplyBatcher:
        """One reply through the session (`EngineSession.reply`) in a worker, its events batched
        to the chat pane (its messages, a failure too, in the pane's one queue). The batcher is
        made here, on the UI thread: the pane keeps it (what a quit saves)."""
        pane = self.client.chat_pane
        self.pace.fastest = self.update_interval
        self.pace.start_reply()
        batcher = ReplyBatcher(pane.post_message, purpose, self.update_interval,
                               self.pace if self.update_interval > 0 else None)
        self._reply_worker(request, batcher, pane.stop_requested)
        return batcher

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _reply_worker(self, request: ReplyRequest, batcher: ReplyBatcher, stop: threading.Event) -> None:
        worker = get_current_worker()

        def cancelled() -> bool:
            return worker.is_cancelled or stop.is_set()

        try:
            for event in self.pair.session.reply(request, cancelled):
                batcher.add(event)
        except SpectuiError as error:
            batcher.flush()
            fault = faults.of_error(error, "app")
            batcher.post(ReplyFailed(fault.line, fault.reload))
        except Exception as error:  # a bug, but the UI must leave its busy state: say so, log it
            batcher.flush()
            batcher.post(ReplyFailed(unexpected(error, "generating the reply")))
        finally:
            batcher.done.set()

    def check_loaded(self) -> Worker[LoadedHealth]:
        """Before a message is sent to models loaded a while ago (`EngineSession.check_health`):
        file and network calls, never on the UI thread."""
        return self._health_worker()

    @work(thread=True, group="health", exit_on_error=False)
    def _health_worker(self) -> LoadedHealth:
        return self.pair.session.check_health()

    @work(thread=True, exclusive=True, group="pull", exit_on_error=False)
    def prepare_pair(self, name: str, pulled: bool) -> None:
        """Resolve a pulled pair, or pull (download, verify, check) one that is not."""
        from spectui.catalog import pull_pair, resolve_pair

        worker = get_current_worker()
        tqdm_class = tqdm_posting(self.post_message, lambda: worker.is_cancelled)
        try:
            pair = resolve_pair(name) if pulled else pull_pair(name, tqdm_class=tqdm_class)
        except SpectuiError as error:
            if not worker.is_cancelled:
                self.post_message(EngineFailed(str(error), "pull"))
            return
        except Exception as error:  # a bug, or a disk problem the pull did not name
            if not worker.is_cancelled:
                self.post_message(EngineFailed(unexpected(error, f"getting pair {name}"), "pull"))
            return
        self.post_message(PairReady(pair.name, pair.target, pair.draft, pair.recommended_k, pair.drafter))

    # ----- what the workers post ------------------------------------------------------------------

    def on_load_progress(self, message: LoadProgress) -> None:
        self.client.chat_pane.set_status(message.label + "…", message.fraction)

    def on_gpu_unused(self, message: GpuUnused) -> None:
        self.client.panel.show_gpu_line(message.text)

    async def on_load_warning(self, message: LoadWarning) -> None:
        await self._warn(self.pair.options.renamed(message.text), timeout=12)

    async def _warn(self, text: str, timeout: float | None = None) -> None:
        self.client.notify(text, severity="warning", timeout=timeout)
        await self.client.note(text, "warning")

    async def on_models_loaded(self, message: ModelsLoaded) -> None:
        loaded = message.pair
        self.pair.drafters = loaded.drafters
        self.pair.recommended_sampling = loaded.sampling
        self.pair.loaded_mode = loaded.mode
        self.pair.draft_same_model = loaded.draft_same_model
        self.client.show_models(loaded=True)
        self.client.refresh_k()
        for note in map(self.pair.options.renamed, loaded.drafters.notes):
            await self._warn(note, timeout=12)
        if loaded.mode == "plain-chat":
            await self._warn(loaded.template)
        await self.client.chat_pane.show_examples()

    async def on_baseline_measured(self, message: BaselineMeasured) -> None:
        calibration = message.calibration
        if calibration.baseline is not None:
            self.pair.baseline = calibration.baseline
        self.client.panel.measured(calibration.baseline,
                                   calibration.describe(with_figures=self.pair.options.show_timings))
        self.pair.ready = True
        await self.client.chat_pane.models_ready()

    async def on_pair_ready(self, message: PairReady) -> None:
        kind = pair_drafter_kind(message.drafter, self.pair.options.drafter.kind)
        options = for_pair(self.pair.options, message.name, message.target, message.draft, kind,
                           message.recommended_k)
        self.pair.draft_control = options.draft_control()
        await self.client.note(f"switched to pair {message.name}: {options.models_label}")
        self.start_loading(options)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        """A load or a pull failed (a reply's failure is the chat pane's: `ReplyFailed`)."""
        self.client.notify(message.text, severity="error", timeout=15)
        await self.client.note(message.text, "error")
        self.pair.reload_pending = self.pair.reload_pending or message.reload
        pane = self.client.chat_pane
        if message.during == "load":
            self.pair.load_failed = True
            self.client.panel.measured(None, None)
            again = "your next message loads it again, or " if message.reload else ""
            pane.set_status(f"no model loaded: {again}pick a pair with ctrl+p", busy=False)
            await pane.cancel_queued("no model could be loaded for the queued message")
        else:
            pane.set_status("pull failed", busy=False)


def no_drafter_reason(drafters: DrafterInfo) -> str:
    """Why nothing can draft, for the user: the load's own note, or what to do."""
    if drafters.notes:
        return drafters.notes[0]
    return ("start with a draft model (--draft, or a pair with ctrl+p), or with a lookup that needs none: "
            "--drafter suffix or --drafter ngram")
