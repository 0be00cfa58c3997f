"""The app's thread workers: load + calibrate, generate, check the loaded models, pull; and the
close of the models as the app ends. Mixed into `SpectuiApp`.

Every engine call (llama.cpp, the engine's file and network checks) runs here, never on the UI
thread (tests/test_ui_threads.py holds the app to it). Each worker checks
`get_current_worker().is_cancelled` (Textual sets it on quit, or when an exclusive worker of the
same group replaces it) and reports only by posting the messages of `spectui.ui.messages`.
"""

from __future__ import annotations

import copy
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from textual import work
from textual.message import Message
from textual.worker import get_current_worker
from tqdm import tqdm

from spectui import faults
from spectui.chat.template import ChatMessage
from spectui.engine.config import recommended_sampling
from spectui.engine.drafters.spec import HistorySource
from spectui.engine.events import CycleStats, GenerationStats, Progress
from spectui.errors import LoadCancelled, SpectuiError
from spectui.session import baseline, machine, memory
from spectui.session.history import store_history
from spectui.session.loaded import EngineSession
from spectui.session.options import ChatOptions
from spectui.session.reply import ReplyDone, ReplyEvent, ReplyPiece, ReplyRequest
from spectui.ui.core import AppCore
from spectui.ui.messages import (
    BaselineMeasured,
    EngineFailed,
    GpuUnused,
    LoadProgress,
    LoadWarning,
    ModelsLoaded,
    PairReady,
    ReplyFinished,
    ReplyPurpose,
    ReplyUpdate,
)
from spectui.ui.stats_panel import same_model

if TYPE_CHECKING:
    from spectui.engine.generator import Generator

UPDATE_INTERVAL = 0.1  # seconds between ReplyUpdate messages: ~10 screen updates a second
PROGRESS_INTERVAL = 0.1
CLOSE_WAIT = 5.0
"""Seconds the app, ending, waits for a reply thread to let go of the models before freeing them."""
Post = Callable[[Message], object]


def unexpected(error: Exception, doing: str) -> str:
    """The one line for an exception a worker did not expect; its traceback goes to a log file
    (a file or disk problem gets its own line, without a log)."""
    from spectui.crashlog import describe_os_error, report

    if isinstance(error, OSError) and (line := describe_os_error(error)):
        return line
    return report(error, doing)


class ReplyBatcher:
    """Collects a reply's events and posts them in batches a few times a second."""

    def __init__(self, post: Post, purpose: ReplyPurpose, interval: float = UPDATE_INTERVAL) -> None:
        self.post = post
        self.purpose = purpose
        self.interval = interval
        self.pieces: list[ReplyPiece] = []
        self.streamed: list[ReplyPiece] = []
        """Every piece of the reply so far, posted or not (what a quit saves)."""
        self.done = threading.Event()
        """Set once the reply has ended (its last message is posted)."""
        self.cycles: list[CycleStats] = []
        self.totals: GenerationStats | None = None
        self.any_cycle = False
        self.all_plain = True
        self._last_post = time.monotonic()

    def add(self, event: ReplyEvent) -> None:
        if isinstance(event, ReplyPiece):
            self.pieces.append(event)
            self.streamed.append(event)
        elif isinstance(event, Progress):
            self.cycles.append(event.cycle)
            self.totals = event.totals
            self.any_cycle = True
            self.all_plain = self.all_plain and event.cycle.k == 0
        elif isinstance(event, ReplyDone):
            self.flush()
            speculation_off = self.any_cycle and self.all_plain
            self.post(ReplyFinished(self.purpose, event, speculation_off))
            self.done.set()
            return
        if time.monotonic() - self._last_post >= self.interval:
            self.flush()

    def split(self) -> tuple[str, str]:
        """Everything streamed so far as (answer, reasoning), as the reply's widget shows it."""
        pieces = list(self.streamed)
        answer = "".join(piece.text for piece in pieces if not piece.thinking)
        reasoning = "".join(piece.text for piece in pieces if piece.thinking).strip()
        return answer, reasoning

    def flush(self) -> None:
        if self.pieces or self.cycles:
            totals = copy.deepcopy(self.totals)
            self.post(ReplyUpdate(self.purpose, tuple(self.pieces), tuple(self.cycles), totals))
        self.pieces, self.cycles = [], []
        self._last_post = time.monotonic()


class Throttle:
    """Calls through at most once per `interval`, plus always at fraction 1.0."""

    def __init__(self, post: Post, label: str, interval: float = PROGRESS_INTERVAL,
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self.post, self.label, self.interval = post, label, interval
        self.cancelled = cancelled
        self._last = 0.0

    def __call__(self, fraction: float) -> bool:
        """Post the progress; False (stop loading) once the worker is cancelled."""
        now = time.monotonic()
        if fraction >= 1.0 or now - self._last >= self.interval:
            self._last = now
            self.post(LoadProgress(self.label, fraction))
        return not self.cancelled()


def tqdm_posting(post: Post, is_cancelled: Callable[[], bool]) -> type[tqdm[Any]]:
    """A tqdm class for huggingface_hub that posts progress instead of printing it."""

    class UiTqdm(tqdm):  # type: ignore[type-arg]  # generic in its stubs only: `tqdm[Any]` fails at run time
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.update(file=io.StringIO(), disable=False)
            super().__init__(*args, **kwargs)
            self._throttle = Throttle(post, f"downloading {self.desc or 'model'}")

        def update(self, n: float | None = 1) -> bool | None:
            if is_cancelled():
                raise InterruptedError("pull cancelled")
            shown = super().update(n)
            if self.total:
                self._throttle(min(self.n / self.total, 1.0))
            return shown

    return UiTqdm


@dataclass(frozen=True)
class LoadedHealth:
    """What `EngineWorkers.check_loaded` found."""

    fault: SpectuiError | None = None
    """Why the loaded models cannot serve the next reply (None: they can)."""
    removed: tuple[str, ...] = ()
    """Names of loaded model files no longer on disk (the loaded copy still works)."""


def draft_is_target_model(generator: Generator) -> bool:
    """The draft model is the target's own at another precision (GGUF metadata reads: a worker's)."""
    from spectui.engine.drafters.model import DraftModelDrafter

    draft = generator.drafters.get("model")
    return isinstance(draft, DraftModelDrafter) and same_model(generator.target, draft.model)


def close_models(session: EngineSession, timeout: float = CLOSE_WAIT) -> bool:
    """Free the loaded models as the app ends, on a thread of its own (llama.cpp's frees are engine
    calls), waiting up to `timeout` for a reply thread to let go of them and as long again for
    the frees; False when they were not freed in time (the process ends anyway)."""
    freed: list[bool] = []
    closer = threading.Thread(target=lambda: freed.append(session.close(timeout)), name="spectui-close",
                              daemon=True)
    closer.start()
    closer.join(2 * timeout)
    return freed == [True]


class EngineWorkers(AppCore):
    """Worker methods of the app; the app provides `session`, `post_message` and friends."""

    update_interval: float = UPDATE_INTERVAL
    """Seconds between batched reply updates (tests set 0 to see every event)."""

    def load_models(self, options: ChatOptions) -> None:
        """Load the models in a worker. The past chats the suffix drafter learns from are read
        here, on the UI thread, which owns the chat store's SQLite connection."""
        self._load_worker(options, store_history(self.chat.store))

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

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def generate_reply(self, request: ReplyRequest, purpose: ReplyPurpose) -> None:
        """One reply through the reply core (`session.reply`), its events batched to the UI."""
        worker = get_current_worker()
        stop = self.replies.stop_requested

        def cancelled() -> bool:
            return worker.is_cancelled or stop.is_set()

        batcher = ReplyBatcher(self.post_message, purpose, self.update_interval)
        self.replies.batcher = batcher
        try:
            for event in self.pair.session.reply(request, cancelled):
                batcher.add(event)
        except SpectuiError as error:
            batcher.flush()
            fault = faults.of_error(error, "app")
            self.post_message(EngineFailed(fault.line, "reply", fault.reload))
        except Exception as error:  # a bug, but the UI must leave its busy state: say so, log it
            batcher.flush()
            self.post_message(EngineFailed(unexpected(error, "generating the reply"), "reply"))
        finally:
            batcher.done.set()

    @work(thread=True, group="health", exit_on_error=False)
    def check_loaded(self) -> LoadedHealth:
        """Before a message is sent to models loaded a while ago: a model file that changed, an
        RPC worker whose connection closed while idle (`Generator.check_health`), and the loaded
        files since removed from disk. File and network calls: never on the UI thread."""
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
