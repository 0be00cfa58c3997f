"""`EngineHost` (`#engine`, never shown): the pair of models (`PairState`), every engine worker
(load + calibrate, a reply, the health check of loaded models, a pair's pull) and the loading
messages those workers post.

The workers run on this one node, so `exclusive=True, group="engine"` keeps a load and a reply
from running together. The loading messages (`LoadProgress` … `EngineFailed`) come back here; the
host tells the rest through `EngineClient` (what it asks of the app: the chat pane's status line
and queued message, the panel, notes and toasts). A reply's messages go to the chat pane, a
reply's failure with them (so it is seen after the reply's last pieces; the pane hands it back).
The other parts read `pair` (`app.pair`) and change it only through the methods here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, Protocol, cast

from textual import work
from textual.notifications import SeverityLevel
from textual.widget import Widget
from textual.worker import Worker, get_current_worker

from spectui import faults
from spectui.chat.template import ChatMessage
from spectui.engine.config import recommended_sampling
from spectui.engine.drafters.spec import DrafterInfo, HistorySource
from spectui.errors import LoadCancelled, SpectuiError
from spectui.session import baseline, machine, memory
from spectui.session.baseline import Baseline
from spectui.session.history import store_history
from spectui.session.options import ChatOptions, for_pair, pair_drafter_kind
from spectui.session.reply import ReplyRequest
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
from spectui.ui.state import ChatState, PairState, ReplyState
from spectui.ui.workers import (
    UPDATE_INTERVAL,
    LoadedHealth,
    Post,
    ReplyBatcher,
    Throttle,
    draft_is_target_model,
    tqdm_posting,
    unexpected,
)

if TYPE_CHECKING:
    from textual.message import Message

    from spectui.ui.stats_panel import StatsPanel


class ReplyPane(Protocol):
    """What the engine host asks of the chat pane (`ChatPane`, which imports this module, so it
    is declared here and checked against it where `SpectuiApp` joins them): the reply state and
    message queue a reply worker posts to, the status line, and the pane's turns after a load."""

    replies: ReplyState

    def post_message(self, message: Message) -> bool: ...
    def set_status(self, text: str, fraction: float | None = None, *, busy: bool = True) -> None: ...
    def ready_status(self) -> None: ...
    async def send_queued(self) -> None: ...
    async def cancel_queued(self, reason: str = ...) -> bool: ...
    async def end_reply(self) -> None: ...


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
    async def show_examples(self) -> None: ...


class EngineHost(Widget):
    """Owns `pair` and runs every engine worker; handles what the loading workers post."""

    DEFAULT_CSS: ClassVar[str] = "EngineHost { display: none; }"

    update_interval: float = UPDATE_INTERVAL
    """Seconds between batched reply updates (tests set 0 to see every event)."""

    def __init__(self, pair: PairState, *, id: str) -> None:
        super().__init__(id=id)
        self.pair = pair

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

    # ----- the workers --------------------------------------------------------------------------

    def load_models(self, options: ChatOptions) -> None:
        """Load the models in a worker. The past chats the suffix drafter learns from are read
        here, on the UI thread, which owns the chat store's SQLite connection."""
        self._load_worker(options, store_history(self.client.chat.store))

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _load_worker(self, options: ChatOptions, history: HistorySource) -> None:
        worker = get_current_worker()
        try:
            plan = self._memory_plan(options)
            for warning in plan.warnings:
                self.post_message(LoadWarning(warning))
            if plan.gpu_header:
                self.post_message(GpuUnused(plan.gpu_header))
            with self.pair.session.lock:
                self.pair.session.release()
                self._load_locked(options, plan, lambda: worker.is_cancelled, history)
        except LoadCancelled:
            return  # quitting or switching pairs: nothing to report
        except SpectuiError as error:
            fault = faults.of_error(error, "app")
            self.post_message(EngineFailed(fault.line, "load", fault.reload))
        except Exception as error:  # a bug, but the UI must not wait forever: say so, log the trace
            self.post_message(EngineFailed(unexpected(error, "loading the models"), "load"))

    def _load_locked(self, options: ChatOptions, plan: memory.MemoryPlan,
                     cancelled: Callable[[], bool], history: HistorySource | None = None) -> None:
        from spectui.engine.generator import load_generator

        progress = Throttle(self.post_message, f"loading {options.models_label}", cancelled=cancelled)
        meter = machine.LoadMeter()
        threads = options.threads or self._choose_threads(meter)
        generator = load_generator(
            options.target, plan.apply(options.drafter), n_ctx=options.n_ctx,
            n_gpu_layers=plan.n_gpu_layers, n_threads=threads, progress=progress,
            history=history, rpc=options.rpc, tensor_split=options.tensor_split,
        )
        if cancelled():
            generator.close()
            return
        self.pair.session.install(generator, options.mode)
        chat_format = self.pair.session.chat_format
        assert chat_format is not None
        self.post_message(ModelsLoaded(options.target.name, generator.describe(),
                                       chat_format.description, chat_format.mode,
                                       recommended_sampling(generator.target.meta),
                                       draft_is_target_model(generator)))
        self.post_message(LoadProgress("warming up and measuring the speculation-off baseline", None))
        text = baseline.COMPLETION_PROMPT if chat_format.is_completion else baseline.CALIBRATION_PROMPT
        prompt = self.pair.session.prompt_tokens([ChatMessage("user", text)])
        meter.others()
        calibration = baseline.calibrate(generator, prompt, cancelled, options.calibration_tokens)
        others = meter.others()
        if calibration.baseline is not None:
            calibration = replace(calibration, baseline=replace(calibration.baseline, others_load=others))
        self.post_message(BaselineMeasured(calibration))

    def _choose_threads(self, meter: machine.LoadMeter) -> int:
        """One llama.cpp thread per core other programs leave free; said when that is fewer."""
        others = meter.sample()
        threads = machine.default_threads(others)
        if threads < machine.cpu_count() and others is not None:
            self.post_message(LoadWarning(
                f"using {threads} of {machine.cpu_count()} CPU threads: other programs keep "
                f"{others:.1f} cores busy (--threads N chooses)"))
        return threads

    def _memory_plan(self, options: ChatOptions) -> memory.MemoryPlan:
        return memory.plan_run(options.target, options.drafter, options.n_ctx, options.n_gpu_layers)

    def generate_reply(self, request: ReplyRequest, purpose: ReplyPurpose) -> Worker[None]:
        """One reply through the reply core (`session.reply`), its events batched to the chat pane
        (its messages, a failure too, in the pane's one queue)."""
        pane = self.client.chat_pane
        return self._reply_worker(request, purpose, pane.replies, pane.post_message)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _reply_worker(self, request: ReplyRequest, purpose: ReplyPurpose, replies: ReplyState,
                      post: Post) -> None:
        worker = get_current_worker()
        stop = replies.stop_requested

        def cancelled() -> bool:
            return worker.is_cancelled or stop.is_set()

        batcher = ReplyBatcher(post, purpose, self.update_interval)
        replies.batcher = batcher
        try:
            for event in self.pair.session.reply(request, cancelled):
                batcher.add(event)
        except SpectuiError as error:
            batcher.flush()
            fault = faults.of_error(error, "app")
            post(EngineFailed(fault.line, "reply", fault.reload))
        except Exception as error:  # a bug, but the UI must leave its busy state: say so, log it
            batcher.flush()
            post(EngineFailed(unexpected(error, "generating the reply"), "reply"))
        finally:
            batcher.done.set()

    def check_loaded(self) -> Worker[LoadedHealth]:
        """Before a message is sent to models loaded a while ago: a model file that changed, an
        RPC worker whose connection closed while idle (`Generator.check_health`), and the loaded
        files since removed from disk. File and network calls: never on the UI thread."""
        return self._health_worker()

    @work(thread=True, group="health", exit_on_error=False)
    def _health_worker(self) -> LoadedHealth:
        with self.pair.session.lock:
            generator = self.pair.session.generator
            if generator is None:
                return LoadedHealth()
            try:
                generator.check_health()
            except SpectuiError as error:
                return LoadedHealth(error, tuple(generator.removed_files()))
            return LoadedHealth(None, tuple(generator.removed_files()))

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
        self.pair.drafters = message.drafters
        self.pair.recommended_sampling = message.sampling
        self.pair.loaded_mode = message.mode
        self.pair.draft_same_model = message.draft_same_model
        self.client.show_models(loaded=True)
        self.client.refresh_k()
        for note in map(self.pair.options.renamed, message.drafters.notes):
            await self._warn(note, timeout=12)
        if message.mode == "plain-chat":
            await self._warn(message.template_note)
        await self.client.show_examples()

    async def on_baseline_measured(self, message: BaselineMeasured) -> None:
        calibration = message.calibration
        if calibration.baseline is not None:
            self.pair.baseline = calibration.baseline
        self.client.panel.measured(calibration.baseline,
                                   calibration.describe(with_figures=self.pair.options.show_timings))
        self.pair.ready = True
        pane = self.client.chat_pane
        pane.ready_status()
        if pane.replies.queued is not None:
            await pane.send_queued()

    async def on_pair_ready(self, message: PairReady) -> None:
        kind = pair_drafter_kind(message.drafter, self.pair.options.drafter.kind)
        options = for_pair(self.pair.options, message.name, message.target, message.draft, kind,
                           message.recommended_k)
        self.pair.draft_control = options.draft_control()
        await self.client.note(f"switched to pair {message.name}: {options.models_label}")
        self.start_loading(options)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        """A load, a pull or (handed on by the chat pane, after the reply's last pieces) a reply failed."""
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
        elif message.during == "pull":
            pane.set_status("pull failed", busy=False)
        else:
            await pane.end_reply()
