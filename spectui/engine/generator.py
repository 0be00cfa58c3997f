"""The generation loop around the speculative step: prompt, cycles, stops, streaming, stats.

One `Generator` holds the loaded target (and draft) and serves many replies; each reply reuses
whatever prefix of the prompt the KV caches already hold. K = 0 is the speculation-off path:
the same loop, no draft work, which is why it is the honest baseline.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from spectui.engine.autodraft import AutoDraft
from spectui.engine.compat import check_compatible
from spectui.engine.config import AUTO, DraftControl, GenerationConfig
from spectui.engine.drafters.base import Proposer
from spectui.engine.drafters.model import DraftModelProposer
from spectui.engine.events import CycleStats, Event, Finished, GenerationStats, Progress, StopReason
from spectui.engine.model import LlamaModel, ProgressCallback
from spectui.engine.speculative import pick, speculative_step
from spectui.engine.textstream import TextStream
from spectui.errors import ContextFullError, UnsupportedModelError


def context_full_message(n_ctx: int) -> str:
    return f"the context is full ({n_ctx} tokens); start a new chat or raise --ctx"


class Generator:
    speculation_off: str | None = None
    """Why this target cannot speculate (e.g. a recurrent model without rollback), one line."""

    def __init__(self, target: LlamaModel, proposer: Proposer | None = None) -> None:
        self.target = target
        self.proposer = proposer

    @property
    def has_draft(self) -> bool:
        return self.proposer is not None

    def reset(self) -> None:
        """Forget every cached token, so the next reply reads its whole prompt (benchmarks)."""
        self.target.reset()
        if self.proposer is not None:
            self.proposer.reset()

    def close(self) -> None:
        if self.proposer is not None:
            self.proposer.close()
        self.target.close()

    def generate(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        control: DraftControl | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Iterator[Event]:
        """Stream one reply to `prompt` (token ids). Blocking: run it in a worker thread."""
        control = control or DraftControl(0)
        reply = _Reply(self, config)
        try:
            yield from reply.run(list(prompt), control, cancelled)
        except ContextFullError:
            yield from reply.finish("context", context_full_message(self.target.n_ctx))


class _Reply:
    """State of one reply in flight."""

    def __init__(self, generator: Generator, config: GenerationConfig) -> None:
        self.target = generator.target
        self.proposer = generator.proposer
        self.config = config
        self.cfg = config.sampling
        self.rng = np.random.default_rng(config.sampling.seed)
        self.stats = GenerationStats()
        self.stream = TextStream(config.stop)
        self.tokens: list[int] = []
        self.auto = AutoDraft()

    def run(self, prompt: list[int], control: DraftControl, cancelled: Callable[[], bool]) -> Iterator[Event]:
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= self.target.n_ctx:
            yield from self.finish("context", context_full_message(self.target.n_ctx))
            return
        first = self._prefill(prompt)
        context = [*prompt, first]
        pieces, reason, emitted = self._accept([first], drafted=0)
        self.stats.generated_tokens = emitted
        yield from pieces
        while reason is None:
            if cancelled():
                reason = "cancelled"
                break
            k = self._draft_length(control)
            if self.target.room() < 1:
                raise ContextFullError(context_full_message(self.target.n_ctx))
            step = speculative_step(self.target, self.proposer, context, k, self.cfg, self.rng, self._p_min(control))
            self.auto.observe(step)
            context.extend(step.tokens)
            pieces, reason, emitted = self._accept(step.tokens, drafted=step.accepted)
            yield from pieces
            cycle = CycleStats(k, step.drafted, step.accepted, emitted, step.draft_seconds + step.verify_seconds)
            self.stats.add_cycle(cycle)
            yield Progress(cycle, self.stats.snapshot())
        yield from self.finish(reason)

    def _prefill(self, prompt: list[int]) -> int:
        """Read the prompt (only the part not already cached) and pick the first token."""
        start = time.perf_counter()
        self.stats.prompt_tokens = len(prompt) - self.target.kept_on_sync(prompt)
        logits = self.target.sync(prompt)
        first = pick(logits, self.cfg, self.rng)
        if self.proposer is not None:
            self.proposer.prefill(prompt)
        self.stats.prompt_seconds = time.perf_counter() - start
        return first

    def _draft_length(self, control: DraftControl) -> int:
        """K for this cycle: the user's, or auto's; never past max_tokens or the context."""
        if self.proposer is None:
            return 0
        wanted = control.effective_k()
        k = self.auto.choose() if wanted == AUTO else wanted
        remaining = self.config.max_tokens - len(self.tokens) - 1
        return max(0, min(k, remaining, self.target.room() - 1, self.target.max_undo))

    def _p_min(self, control: DraftControl) -> float:
        """A fixed K drafts exactly K; auto stops a draft once a token is not worth its cost."""
        return self.auto.p_min() if control.effective_k() == AUTO else 0.0

    def _accept(self, new_tokens: list[int], drafted: int) -> tuple[list[Event], StopReason | None, int]:
        """Append tokens to the reply in order, stopping at EOS, a stop string or max_tokens.

        The first `drafted` tokens came from the draft (accepted by the target). Returns the text
        pieces, why the reply ended (None: it goes on) and how many tokens were taken.
        """
        pieces: list[Event] = []
        for i, token in enumerate(new_tokens):
            if self.target.is_eog(token):
                return pieces, "eos", i
            self.tokens.append(token)
            pieces.extend(self.stream.feed(self.target.token_bytes(token), from_draft=i < drafted))
            if self.stream.stopped:
                return pieces, "stop", i + 1
            if len(self.tokens) >= self.config.max_tokens:
                return pieces, "length", i + 1
        return pieces, None, len(new_tokens)

    def finish(self, reason: StopReason, message: str = "") -> Iterator[Event]:
        yield from self.stream.flush()
        yield Finished(reason, self.stats.snapshot(), tuple(self.tokens), self.stream.text, message)


def load_generator(
    target_path: str | os.PathLike[str],
    draft_path: str | os.PathLike[str] | None = None,
    *,
    n_ctx: int = 4096,
    n_gpu_layers: int | None = None,
    draft_n_gpu_layers: int | None = None,
    n_threads: int | None = None,
    progress: ProgressCallback | None = None,
) -> Generator:
    """Load target and draft, check they are compatible, and return a ready `Generator`.

    `progress` receives 0..1 over both loads (the target is most of the work).
    """
    def part(lo: float, hi: float) -> ProgressCallback | None:
        return None if progress is None else (lambda f: progress(lo + (hi - lo) * f))

    target = LlamaModel.load(target_path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers,
                             n_threads=n_threads, progress=part(0.0, 0.8 if draft_path else 1.0))
    if draft_path is None or target.speculation_blocker:
        generator = Generator(target)
        generator.speculation_off = target.speculation_blocker
        return generator
    try:
        # A draft goes back by state checkpoints, never by snapshots: it keeps none (rollback_depth=0).
        draft = LlamaModel.load(draft_path, n_ctx=n_ctx,
                                n_gpu_layers=n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers,
                                n_threads=n_threads, progress=part(0.8, 1.0), rollback_depth=0)
    except Exception:
        target.close()
        raise
    try:
        check_compatible(target, draft, target_name=Path(target_path).name, draft_name=Path(draft_path).name)
        if draft.speculation_blocker:
            raise UnsupportedModelError(
                f"the draft {draft.path.name} (arch {draft.arch}) cannot roll back its recurrent state; "
                "pick another draft or run without --draft"
            )
    except Exception:
        draft.close()
        target.close()
        raise
    return Generator(target, DraftModelProposer(draft))
