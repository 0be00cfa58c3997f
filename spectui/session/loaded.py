"""`EngineSession`: the one owner of a loaded pair, for every front end (the chat app, `spectui
serve`, `spectui bench`), with no UI.

    session = EngineSession()
    plan = session.plan(LoadSpec.of_chat(options))     # memory plan, threads: say plan.warnings
    pair = session.load(plan, LoadReport(...), cancelled)   # the models, installed and calibrated
    for event in session.reply(request, cancelled): ...   # a reply through the reply core
    session.check_health()                               # before a reply to models loaded long ago
    session.close()

llama.cpp contexts are not thread-safe: a load (with its calibration), a reply and a health check
each hold `lock` for as long as they touch the generator, so a reply started while a new pair
loads simply waits. Every method but `plan` is blocking engine work: call it on a worker thread
(the chat app's workers, serve's engine thread, bench's worker), never on an event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from spectui.chat.template import ChatFormat, ChatMessage
from spectui.errors import SpectuiError
from spectui.session.pair_load import LoadedHealth, LoadedPair, LoadPlan, LoadReport, LoadSpec, same_model
from spectui.session.reply import ReplyEvent, ReplyRequest, never, run_reply

if TYPE_CHECKING:
    from spectui.engine.generator import Generator
    from spectui.session.baseline import Calibration

BuildRequest = Callable[["Generator"], ReplyRequest]
"""Makes a reply's request from the loaded generator, under the session's lock (it may call
llama.cpp: tokenizing, a grammar)."""


class NotLoaded(SpectuiError):
    """A reply asked of a session with no models loaded."""


class EngineSession:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generator: Generator | None = None
        self.chat_format: ChatFormat | None = None
        """How prompts are made for the loaded models (read on any thread: a plain attribute)."""

    # ----- loading ------------------------------------------------------------------------------

    def plan(self, spec: LoadSpec) -> LoadPlan:
        """What is decided before loading (GGUF headers and the machine only, no llama.cpp load):
        the memory plan, one line when the files will not do, and the threads."""
        from spectui.session import machine, memory

        plan = memory.plan_run(spec.target, spec.drafter, spec.n_ctx, spec.n_gpu_layers)
        if spec.threads:
            return LoadPlan(spec, plan, spec.threads)
        others = machine.LoadMeter().sample()
        threads = machine.default_threads(others)
        note = None
        if threads < machine.cpu_count() and others is not None:
            note = (f"using {threads} of {machine.cpu_count()} CPU threads: other programs keep "
                    f"{others:.1f} cores busy (--threads N chooses)")
        return LoadPlan(spec, plan, threads, note)

    def load(self, plan: LoadPlan, report: LoadReport | None = None,
             cancelled: Callable[[], bool] = never) -> LoadedPair | None:
        """Load the planned pair in place of the one loaded (freed first), install it, and
        calibrate it when the spec asks; what it offers, or None when `cancelled` before it was
        installed (nothing is loaded then)."""
        from spectui.engine.generator import load_generator

        spec, report = plan.spec, report or LoadReport()
        with self.lock:
            self.release()
            generator = load_generator(
                spec.target, plan.memory.apply(spec.drafter), n_ctx=spec.n_ctx,
                n_gpu_layers=plan.memory.n_gpu_layers, n_threads=plan.threads, progress=report.progress,
                history=spec.history, rpc=spec.rpc, tensor_split=spec.tensor_split,
            )
            if cancelled():
                generator.close()
                return None
            chat_format = self.install(generator, spec.mode)
            pair = _offered(generator, chat_format)
            report.loaded(pair)
            if spec.calibration_tokens is None:
                return pair
            report.calibrating()
            return replace(pair, calibration=self._calibrate(generator, chat_format, spec.calibration_tokens,
                                                             cancelled))

    def _calibrate(self, generator: Generator, chat_format: ChatFormat, tokens: int,
                   cancelled: Callable[[], bool]) -> Calibration:
        """Warm start, K = auto seeded, the baseline timed (`session.baseline`), with the cores
        other programs used meanwhile."""
        from spectui.session import baseline, machine

        text = baseline.COMPLETION_PROMPT if chat_format.is_completion else baseline.CALIBRATION_PROMPT
        prompt = chat_format.prompt_tokens(generator.target, [ChatMessage("user", text)])
        meter = machine.LoadMeter()
        calibration = baseline.calibrate(generator, chat_format, prompt, cancelled, tokens)
        others = meter.others()
        if calibration.baseline is None:
            return calibration
        return replace(calibration, baseline=replace(calibration.baseline, others_load=others))

    def install(self, generator: Generator, mode: str = "auto") -> ChatFormat:
        """Take over a freshly loaded generator (call with `lock` held); `mode` as `--mode`.
        Returns the chat format it now renders prompts with."""
        self.release()
        self.generator = generator
        self.chat_format = chat_format = ChatFormat.from_model(generator.target, mode)
        return chat_format

    def release(self) -> None:
        """Free the loaded models (call with `lock` held)."""
        if self.generator is not None:
            self.generator.close()
        self.generator = None
        self.chat_format = None

    # ----- replies --------------------------------------------------------------------------------

    def reply(self, request: ReplyRequest, cancelled: Callable[[], bool] = never) -> Iterator[ReplyEvent]:
        """One reply through the reply core, holding `lock` until it ends (blocking: a worker
        thread). `NotLoaded` when no model is loaded."""
        return self.reply_to(lambda _generator: request, cancelled)

    def reply_to(self, build: BuildRequest, cancelled: Callable[[], bool] = never) -> Iterator[ReplyEvent]:
        """As `reply`, the request made by `build` from the loaded generator under the lock
        (serve's requests need the model: its vocabulary, its context size, its drafters)."""
        with self.lock:
            generator, chat_format = self.generator, self.chat_format
            if generator is None or chat_format is None:
                raise NotLoaded("no model is loaded: pick a pair, or restart with --target/--draft")
            yield from run_reply(generator, chat_format, build(generator), cancelled)

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The whole conversation, rendered and tokenized (the KV cache makes re-sending cheap)."""
        if self.generator is None or self.chat_format is None:
            raise RuntimeError("no model loaded")
        return self.chat_format.prompt_tokens(self.generator.target, messages)

    # ----- health, close ----------------------------------------------------------------------------

    def check_health(self) -> LoadedHealth:
        """Before a reply to models loaded a while ago: a model file that changed, an RPC worker
        whose connection closed while idle (`Generator.check_health`), the loaded files since
        removed from disk. File and network calls: a worker thread."""
        with self.lock:
            generator = self.generator
            if generator is None:
                return LoadedHealth()
            try:
                generator.check_health()
            except SpectuiError as error:
                return LoadedHealth(error, tuple(generator.removed_files()))
            return LoadedHealth(None, tuple(generator.removed_files()))

    def close(self, timeout: float = 5.0) -> bool:
        """Free the models once no thread uses them; False if one still holds the lock."""
        if not self.lock.acquire(timeout=timeout):
            return False
        try:
            self.release()
        finally:
            self.lock.release()
        return True


def _offered(generator: Generator, chat_format: ChatFormat) -> LoadedPair:
    """What the loaded generator offers, as plain values (GGUF metadata reads: the loading thread)."""
    from spectui.engine.generation_config import recommended_sampling

    target = generator.target
    return LoadedPair(generator.describe(), chat_format.description, chat_format.mode,
                      recommended_sampling(target.meta), draft_is_target_model(generator), target.n_ctx,
                      target.n_vocab)


def draft_is_target_model(generator: Generator) -> bool:
    """The draft model is the target's own at another precision (their GGUF metadata)."""
    from spectui.engine.drafters.model import DraftModelDrafter

    draft = generator.drafters.get("model")
    return isinstance(draft, DraftModelDrafter) and same_model(generator.target, draft.model)
