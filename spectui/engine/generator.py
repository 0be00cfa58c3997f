"""The generation loop around the speculative step: prompt, cycles, stops, streaming, stats.

One `Generator` holds the loaded target and its drafters and serves many replies; each reply reuses
whatever prefix of the prompt the caches already hold. K = 0 is the speculation-off path: the same
loop, no drafter work, which is why it is the honest baseline. K = auto's measurements live as long
as the generator, so a reply starts from what the calibration after load and earlier replies
measured, not from a guess.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from spectui.engine import drafters as registry
from spectui.engine.drafters.chain import ChainDrafter, members_of
from spectui.engine.drafters.spec import BuildContext, DrafterInfo, DrafterSpec, HistorySource
from spectui.engine.events import (
    TARGET,
    CycleStats,
    Event,
    Finished,
    GenerationStats,
    Progress,
    StopReason,
    TokenLogprob,
    TokenLogprobs,
)
from spectui.engine.files.heads import check_not_a_head
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig
from spectui.engine.llama import hostcost
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.model.loading import ProgressCallback
from spectui.engine.planning.autodraft import AutoDraft
from spectui.engine.planning.passcosts import VerifyCosts
from spectui.engine.planning.pays import Rate
from spectui.engine.rpc import RpcCluster
from spectui.engine.rpc import connect as connect_rpc
from spectui.engine.step.drafter import Budget, CappedBudget, Drafter, FixedBudget
from spectui.engine.step.grammar import Grammar
from spectui.engine.step.sampling import NoTokenAllowed
from spectui.engine.step.speculative import pick, speculative_step, token_logprob
from spectui.engine.textstream import TextStream
from spectui.errors import ContextFullError, ModelFileError, SpectuiError, WorkerLostError
from spectui.limits import MAX_TREE_LEAVES


class Generator:
    def __init__(self, target: LlamaModel, drafters: Mapping[str, Drafter] | None = None,
                 default_kind: str | None = None, notes: Sequence[str] = ()) -> None:
        self.target = target
        self.drafters: dict[str, Drafter] = dict(drafters or {})
        """The loaded drafters by kind (`model`, `ngram`, …); chains are built from these."""
        self.default_kind = default_kind or registry.default_kind(self.drafters)
        self.notes = list(notes)
        """One line each: why a drafter that was asked for is not running."""
        self._chains: dict[str, Drafter] = {}
        self._autos = _fresh_autos(target)

    # ----- what this generator can do (the UI, bench and CLI ask here) ---------------------

    @property
    def can_speculate(self) -> bool:
        return bool(self.drafters)

    @property
    def speculation_off(self) -> str | None:
        """Why nothing can draft with these models, in one line (None when something can)."""
        if self.drafters:
            return None
        return self.notes[0] if self.notes else "no drafter was asked for"

    @property
    def kinds(self) -> list[str]:
        """Drafter kinds the user can switch between."""
        return registry.offered_kinds(self.drafters)

    def drafter(self, kind: str | None = None) -> Drafter | None:
        """The drafter for `kind` (default: this generator's), or None for `none`/unavailable."""
        kind = kind or self.default_kind
        if kind == registry.NONE_KIND or not self.drafters:
            return None
        if kind in self.drafters:
            return self.drafters[kind]
        if kind not in self._chains:
            members = [self.drafters[m] for m in registry.chain_order(kind) if m in self.drafters]
            if not members:
                return None
            self._chains[kind] = members[0] if len(members) == 1 else ChainDrafter(members)
        return self._chains[kind]

    def label(self, kind: str | None = None) -> str:
        """E.g. "draft model gemma-3-270m-draft-q4_0.gguf", or "none"."""
        drafter = self.drafter(kind)
        return drafter.label if drafter is not None else "none"

    def describe(self) -> DrafterInfo:
        """What this generator offers, for the UI and bench."""
        return DrafterInfo(kinds=tuple(self.kinds), default=self.default_kind,
                           labels={kind: self.label(kind) for kind in self.kinds}, notes=tuple(self.notes))

    def auto(self, greedy: bool) -> AutoDraft:
        """K = auto's figures for greedy or sampled replies (acceptance differs a lot between them)."""
        return self._autos[greedy]

    def forget_measurements(self) -> None:
        """Start K = auto's figures afresh (after a warm-up whose timings were not typical)."""
        self._autos = _fresh_autos(self.target)

    # ----- lifetime -------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every cached token, so the next reply reads its whole prompt (benchmarks)."""
        self.target.reset()
        for drafter in self.drafters.values():
            drafter.reset()

    def close(self) -> None:
        for drafter in self.drafters.values():
            drafter.close()
        self.target.close()

    def models(self) -> list[LlamaModel]:
        """Every model loaded for this generator: the target, then the drafters' (a draft model,
        an MTP assistant)."""
        found = [self.target]
        for drafter in self.drafters.values():
            for name in ("model", "sidecar"):
                model = getattr(drafter, name, None)
                if isinstance(model, LlamaModel) and model not in found:
                    found.append(model)
        return found

    def check_files(self) -> None:
        """Raise `ModelFileError` when a model's file was truncated or rewritten since it was
        loaded (its weights are read from that file): one fstat per model."""
        for model in self.models():
            model.check_file()

    def check_health(self) -> None:
        """Before a reply: a model file that changed, a worker whose connection closed while idle
        (`ModelFileError`, `WorkerLostError`). Only while no decode runs."""
        self.check_files()
        if self.target.rpc is not None:
            self.target.rpc.poll()

    def removed_files(self) -> list[str]:
        """Names of loaded models whose file is no longer at its path (removed, or replaced by
        another): this generator keeps working on the loaded copy; loading again will not."""
        return [model.path.name for model in self.models() if model.file is not None and model.file.removed()]

    def generate(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        control: DraftControl | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Iterator[Event]:
        """Stream one reply to `prompt` (token ids). Blocking: run it in a worker thread.

        A grammar that llama.cpp cannot parse raises `GrammarError` before anything is decoded."""
        control = control or DraftControl(0)
        reply = _Reply(self, config)
        try:
            yield from reply.run(list(prompt), control, cancelled)
        except ContextFullError as error:
            yield from reply.finish("context", str(error), error)
        except WorkerLostError as error:
            yield from reply.finish("worker", f"{error} (the reply so far is kept)", error)
        except ModelFileError as error:
            yield from reply.finish("file", f"{error} (the reply so far is kept)", error)
        except NoTokenAllowed as error:
            yield from reply.finish("stop", str(error))
        finally:
            reply.close()


class _Reply:
    """State of one reply in flight."""

    def __init__(self, generator: Generator, config: GenerationConfig) -> None:
        self.generator = generator
        self.target = generator.target
        self.config = config
        grammar, triggers = config.sampling.grammar, config.sampling.grammar_triggers
        self.grammar = Grammar.compile(self.target, grammar, triggers=triggers) if grammar else None
        self.cfg = replace(config.sampling, constraint=self.grammar)
        self.rng = np.random.default_rng(config.sampling.seed)
        self.stats = GenerationStats()
        self.stream = TextStream(config.stop)
        self.tokens: list[int] = []
        self.auto = generator.auto(self.cfg.greedy)
        rpc = self.target.rpc
        self._traffic_at_start = rpc.traffic() if rpc is not None else None

    def run(self, prompt: list[int], control: DraftControl, cancelled: Callable[[], bool]) -> Iterator[Event]:
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= self.target.n_ctx:
            raise ContextFullError.of(self.target.n_ctx)
        self.generator.check_health()
        if control.effective_k() == AUTO:
            self.auto.new_reply()
        first, scored = self._prefill(prompt, self.generator.drafter(control.drafter), control)
        context = [*prompt, first]
        pieces, reason, emitted = self._accept([first], drafted=0, source=TARGET)
        self.stats.generated_tokens = emitted
        yield from pieces
        tail = 0.0  # the previous cycle's bookkeeping after its figures were taken
        if scored is not None and emitted:
            yield TokenLogprobs((scored,))
        while reason is None:
            laps = hostcost.Laps()
            cycle_start = hostcost.now()
            if cancelled():
                reason = "cancelled"
                break
            if self.target.room() < 1:
                raise ContextFullError.of(self.target.n_ctx)
            self.generator.check_files()  # before llama.cpp reads weights a truncation took away
            probe = self.stats.probe_tokens < self.config.baseline_probe
            drafter, budget = self._plan(control, probe)
            laps.lap("bookkeeping")
            step = speculative_step(self.target, drafter, context, budget, self.cfg, self.rng,
                                    self.config.logprobs)
            laps.restart()
            if not probe:
                self.auto.observe(step)
            context.extend(step.tokens)
            source = step.proposal.source
            pieces, reason, emitted = self._accept(step.tokens, step.accepted, source or TARGET)
            k = budget.given_to(source)
            auto = control.effective_k() == AUTO and not probe
            if auto or drafter is None:  # what K = auto realised, or a plain step
                self.auto.observe_cycle(step, hostcost.now() - cycle_start + tail, auto)
            # held at K = 0: nothing was drafted and a drafter asked was held (a held lookup beside
            # a draft model that drafted is not a held cycle)
            held = self.auto.holding(budget.given) if auto and not step.drafted else None
            laps.lap("bookkeeping")
            host = step.host + laps.cost() + hostcost.HostCost(bookkeeping=tail)
            cycle = CycleStats(k, step.drafted, step.accepted, emitted,
                               step.draft_seconds + step.verify_seconds, source, probe, host, step.branches, held,
                               step.draft_seconds)
            started = hostcost.now()
            self.stats.add_cycle(cycle)
            self._count_traffic()
            progress = Progress(cycle, self.stats.snapshot())
            tail = hostcost.now() - started
            yield from pieces
            if step.logprobs and emitted:
                yield TokenLogprobs(step.logprobs[:emitted])
            yield progress
        yield from self.finish(reason)

    def _prefill(self, prompt: list[int], drafter: Drafter | None,
                 control: DraftControl) -> tuple[int, TokenLogprob | None]:
        """Read the prompt (only the part not already cached) and pick the first token (and its
        log-probability, when asked for). A draft model that will not draft soon leaves it
        unread (`prefill_optional`): with speculation off, or held by K = auto with no probe on
        the first cycle, reading it only made the first token later (issue #35)."""
        start = time.perf_counter()
        self.stats.prompt_tokens = len(prompt) - self.target.kept_on_sync(prompt)
        logits = self.target.sync(prompt)
        first = pick(logits, self.cfg, self.rng)
        scored = token_logprob(logits, first, self.config.logprobs) if self.config.logprobs is not None else None
        if self.grammar is not None:
            self.grammar.accept(first)
        k = control.effective_k()
        for member in members_of(drafter) if drafter is not None else ():
            optional = getattr(member, "prefill_optional", False)
            if not (optional and (k == 0 or (k == AUTO and self.auto.stays_held(member.source)))):
                member.prefill(prompt)
        self.stats.prompt_seconds = time.perf_counter() - start
        return first, scored

    def _plan(self, control: DraftControl, probe: bool) -> tuple[Drafter | None, CappedBudget]:
        """This cycle's drafter and budget: the user's K or auto's, never past max_tokens or the
        context, nor past what the drafter can propose; none during a baseline probe."""
        wanted = 0 if probe else control.effective_k()
        if wanted == AUTO and self.auto.plain_due():
            wanted = 0  # a plain step now and then: the guard's baseline, measured as things are now
        drafter = self.generator.drafter(control.drafter) if wanted != 0 else None
        rested = resting_sources(drafter) if wanted == AUTO else None
        if rested and self.auto.rests(rested):
            # every drafter held, nothing due: a plain step that asks them nothing, still a held cycle
            return None, CappedBudget(self.auto, 0, dict.fromkeys(rested, 0))
        remaining = self.config.max_tokens - len(self.tokens) - 1
        cap = min(remaining, self.target.room() - 1, self.target.max_undo, drafter.max_k if drafter else 0)
        inner: Budget = self.auto if wanted == AUTO else FixedBudget(int(wanted))
        return (drafter if cap > 0 else None), CappedBudget(inner, max(cap, 0))

    def _accept(self, new_tokens: list[int], drafted: int,
                source: str) -> tuple[list[Event], StopReason | None, int]:
        """Append tokens to the reply in order, stopping at EOS, a stop string or max_tokens.

        The first `drafted` tokens came from drafter `source` (accepted by the target). Returns the
        text pieces, why the reply ended (None: it goes on) and how many tokens were taken.
        """
        pieces: list[Event] = []
        for i, token in enumerate(new_tokens):
            if self.target.is_eog(token):
                return pieces, "eos", i
            self.tokens.append(token)
            origin = source if i < drafted else TARGET
            shown = token in self.config.shown_tokens
            pieces.extend(self.stream.feed(self.target.token_bytes(token, special=shown), origin))
            if self.stream.stopped:
                return pieces, "stop", i + 1
            if len(self.tokens) >= self.config.max_tokens:
                return pieces, "length", i + 1
        return pieces, None, len(new_tokens)

    def _count_traffic(self) -> None:
        """Round trips and waiting on RPC workers since the reply began."""
        if self._traffic_at_start is not None and self.target.rpc is not None:
            delta = self.target.rpc.traffic() - self._traffic_at_start
            self.stats.round_trips = delta.round_trips
            self.stats.network_wait_seconds = delta.wait_seconds

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()

    def finish(self, reason: StopReason, message: str = "", error: SpectuiError | None = None) -> Iterator[Event]:
        self._count_traffic()
        yield from self.stream.flush()
        yield Finished(reason, self.stats.snapshot(), tuple(self.tokens), self.stream.text, message, error)


def resting_sources(drafter: Drafter | None) -> list[str] | None:
    """The sources of `drafter` (a chain's members) when each may go unasked while held
    (`rests_when_held`: a draft model, a lookup); None when one may not (a head reads the
    target's features every cycle)."""
    if drafter is None:
        return None
    members = members_of(drafter)
    if not all(getattr(member, "rests_when_held", False) for member in members):
        return None
    return [member.source for member in members]


def load_generator(
    target_path: str | os.PathLike[str],
    drafter: DrafterSpec | str | os.PathLike[str] | None = None,
    *,
    n_ctx: int = 4096,
    n_gpu_layers: int | None = None,
    n_threads: int | None = None,
    progress: ProgressCallback | None = None,
    history: HistorySource | None = None,
    rpc: str | RpcCluster | None = None,
    tensor_split: Sequence[float] | None = None,
) -> Generator:
    """Load the target, build the drafters the spec asks for, and return a ready `Generator`.

    `drafter` may also be a draft GGUF's path: the draft model alone (`kind="model"`; what tests
    and measurement scripts mean by it), or None: `auto` without a draft.
    `progress` receives 0..1 over all loads (the target is most of the work). `history` gives
    the drafters that learn from past conversations (`suffix`) the user's past chats.
    `rpc` (`HOST:PORT[,...]`) puts the target's layers on those `spectui worker`s, shared by
    `tensor_split` or else by their free memory; the drafters stay on this machine.
    """
    spec = drafter if isinstance(drafter, DrafterSpec) else DrafterSpec(
        kind=registry.AUTO_KIND if drafter is None else "model", draft=_path(drafter))
    registry.check_spec(spec)

    def part(lo: float, hi: float) -> ProgressCallback | None:
        return None if progress is None else (lambda f: progress(lo + (hi - lo) * f))

    split = 0.8 if spec.draft is not None else 1.0
    if isinstance(rpc, str):
        rpc = connect_rpc(rpc, tensor_split=tensor_split)
    try:
        check_not_a_head(Path(target_path).expanduser())
        options = registry.target_options(spec, Path(target_path).expanduser())
        target = LlamaModel.load(target_path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                                 progress=part(0.0, split), rpc=rpc, tree_seqs=MAX_TREE_LEAVES, **options)
    except Exception:
        if rpc is not None:
            rpc.close()
        raise
    if target.speculation_blocker:
        return Generator(target, {}, registry.NONE_KIND, [target.speculation_blocker])
    ctx = BuildContext(target, n_ctx, n_threads, n_gpu_layers, part(split, 1.0), history)
    try:
        drafters, notes = registry.build_drafters(spec, ctx)
    except BaseException:
        target.close()
        raise
    # A kind that was asked for but cannot run is named in `notes`; what does run drafts instead.
    runs = spec.kind != registry.AUTO_KIND and all(member in drafters for member in spec.members)
    return Generator(target, drafters, spec.kind if runs else None, notes)


def _fresh_autos(target: LlamaModel) -> dict[bool, AutoDraft]:
    """K = auto's figures for greedy (True) and sampled (False) replies; the target's pass costs
    and its plain speed (the guard's baseline) do not depend much on the temperature, so both
    read one table and one rate. Trees only where the target can
    verify them (an attention-only model; see tree_cache.py)."""
    verify, plain = VerifyCosts(), Rate()
    leaves = target.n_seqs if target.can_verify_trees else 1
    return {greedy: AutoDraft(verify=verify, max_leaves=leaves, plain=plain) for greedy in (True, False)}


def _path(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)
