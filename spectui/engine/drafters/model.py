"""The draft-model drafter: a small GGUF that shares the target's tokenizer proposes tokens.

It drafts from its own distribution q (its argmax at T = 0), one forward pass per token, after
catching up on whatever the context gained since it last ran (normally the last accepted draft
token and the target's own token: one pass over two tokens).

When K = auto probes it after holding it at K = 0 for a while, it does not read all it missed:
more than `CATCH_UP_WINDOW` tokens behind, it reads only the last `CATCH_UP_WINDOW` as a sequence
of its own and drafts from that window on. (Behind a lookup's long runs, or after K = 0 set by
hand, it reads everything: a draft that pays keeps its whole context, which copying needs.) A held draft's
probe thus costs the same however long the hold was (reading a 300-token hold cost the demo's weak
draft about 25 target passes, for a probe that gives a token or two); its proposals may be a
little worse for the shorter context, and the target verifies every one, so the output is
unchanged. A new conversation (a prompt that does not continue the window) starts from its first
token again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.spec import BuildContext, DrafterSpec
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step import sampling
from spectui.engine.step.drafter import Budget, Feedback, Proposal
from spectui.engine.step.draftplan import Candidate, Planner
from spectui.engine.step.sampling import Dist
from spectui.errors import UnsupportedModelError

SOURCE = "model"
KIND = KINDS[SOURCE]
CATCH_UP_WINDOW = 16
"""Tokens a draft that fell further behind reads before drafting (see above). A batched read is
not much cheaper per token than a pass on a small draft on the CPU: the demo's Q8_0 draft read 64
tokens in 177 ms, eight of its F32 target's 22 ms passes, so each probe of a held draft cost about
a tenth of the 64-token reply it landed in (issue #35's sixth-session sweep: 0.86-0.93x in those
replies); 16 tokens take 56 ms (docs/BENCHMARKS.md, "never slower")."""
# How llama.cpp's draft measures its confidence when drafting greedily: softmax over its top 10.
GREEDY_CONFIDENCE = SamplingConfig(temperature=1.0, top_k=10, top_p=1.0, min_p=0.0)


def known_stand_in(model: LlamaModel) -> int:
    """The draft's token for a space: what it reads in place of a token only the target has."""
    tokens = model.tokenize(" ")
    return tokens[0] if tokens else 0


def readable(context: Sequence[int], n_vocab: int, stand_in: int) -> Sequence[int]:
    """The context as a draft with `n_vocab` tokens can decode it.

    A target may have a few more tokens than its draft (padded vocabularies: Qwen2.5-7B has 152064,
    its 0.5B draft 151936). The draft never proposes those ids (it picks from its own logits), but
    the target may write one, and llama.cpp refuses to decode an id past the vocabulary
    (`llama_batch_allocr::init`, src/llama-batch.cpp:79). The draft reads a stand-in instead: its
    proposals after it may be worse, but the target verifies every one, so the output is unchanged.
    """
    if not context or max(context) < n_vocab:
        return context
    return [token if token < n_vocab else stand_in for token in context]


class DraftModelDrafter:
    """Proposes tokens from a small draft model's own distribution q."""

    source = SOURCE
    rests_when_held = True
    """Held, it may go unasked for cycles (`AutoDraft.rests`): it reads what it missed when it drafts."""
    prefill_optional = True
    """Its prompt may go unread while it will not draft (speculation off, or held with no probe
    due): it reads what it missed when it next drafts, a probe only the last CATCH_UP_WINDOW."""
    max_k = KIND.max_k

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.label = f"{KIND.label} {model.path.name}"
        self._stand_in = known_stand_in(model)
        self.offset = 0
        """Where the draft's own sequence starts in the reply's context (0 unless a catch-up was
        cut to its window): the draft's cache holds context[offset:]."""
        self.q_temperature: float | None = None
        """When sampling, draw from the draft's distribution at this temperature instead of the
        reply's (the same filters). Any q is exact; this one only changes acceptance:
        scripts/bench_trees.py measures it (not a user setting: it did not pay, BENCHMARKS.md)."""

    def prefill(self, context: Sequence[int]) -> None:
        # another conversation reads from its start, as the target does; this one from the window
        self.model.sync(self._window(readable(context, self.model.n_vocab, self._stand_in), probe=False))

    def _continues(self, context: Sequence[int]) -> bool:
        """Whether the draft's cache (context[offset:] of an earlier context) begins where
        `context[offset:]` does: the same conversation, grown or rewound."""
        cached = self.model.cached
        if self.offset == 0 or self.offset >= len(context) or not cached:
            return self.offset == 0
        n = min(len(cached), len(context) - self.offset, 16)
        return list(context[self.offset:self.offset + n]) == cached[:n]

    def _window(self, context: Sequence[int], probe: bool) -> Sequence[int]:
        """The part of `context` the draft reads: from `offset` (0 for another conversation), moved
        up to the last CATCH_UP_WINDOW tokens when a `probe` finds it further behind than that."""
        if not self._continues(context):
            self.offset = 0
        view = context[self.offset:]
        if probe and len(view) - self.model.kept_on_sync(view) > CATCH_UP_WINDOW:
            self.offset = len(context) - CATCH_UP_WINDOW
            view = context[self.offset:]
        return view

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal(source=SOURCE)
        k = min(budget.k(SOURCE), self.model.room() - 1)
        if k <= 0:
            return proposal
        p_min = budget.p_min(SOURCE)
        plan = budget.plan(SOURCE)
        # With a plan, candidates beside each token where they pay; when sampling, each token is
        # also priced by its own confidence (at T = 0 the tuned early stop, p_min, stays).
        planner = Planner(plan, price_chain=not cfg.greedy) if plan is not None else None
        if plan is not None and not cfg.greedy:
            k = min(plan.max_tokens, self.model.room() - 1)  # each token priced as drawn, not k
        context = readable(context, self.model.n_vocab, self._stand_in)
        # Catch up: decode whatever the draft has not seen (at least the last token).
        view = self._window(context, budget.probing(SOURCE))
        proposal.caught_up = len(view) - self.model.kept_on_sync(view)
        logits = self.model.catch_up(view)
        proposal.work = 1
        proposal.calibrated = planner is not None
        while True:
            if planner is not None and cfg.greedy:  # the confidence's distribution, computed once
                q = sampling.distribution(logits, GREEDY_CONFIDENCE)
                token, dist, confidence = int(q.ids[0]), None, q.top_prob()
            else:
                token, dist, confidence = choose(logits, self._q_config(cfg), rng, p_min)
            if confidence < p_min:
                break  # unsure: a likely rejection costs more than it saves
            if planner is not None:
                q = dist if dist is not None else q
                confidence = q.prob(token)
                if not planner.take(confidence):
                    break  # its chance of acceptance does not pay for its verify row
                planner.candidates(confidence, _more(q, rng, sampled=dist is not None), token)
            proposal.add(token, dist, confidence)
            if len(proposal.tokens) == k or self.model.is_eog(token):
                break
            if budget.hands_over(context, proposal.tokens):
                break  # the lookup ahead takes it from here next cycle, for free
            if planner is not None and not planner.go_on():
                break  # another pass would not pay for itself
            logits = self.model.extend([token])[0]
            proposal.work += 1
        if planner is not None:
            planner.finish(lambda parent, c: proposal.add(c[0], c[1], c[2], parent=parent))
        return proposal

    def _q_config(self, cfg: SamplingConfig) -> SamplingConfig:
        if self.q_temperature is None or cfg.greedy:
            return cfg
        return replace(cfg, temperature=self.q_temperature)

    def feedback(self, result: Feedback) -> None:
        """Nothing to learn: the next `sync` drops the rejected tokens from the draft's cache."""

    def reset(self) -> None:
        self.model.reset()
        self.offset = 0

    def close(self) -> None:
        self.model.close()


NOTHING_ALLOWED = -1.0
"""The confidence `choose` reports when the grammar allows no token: below any p_min, so the
drafter stops."""


def choose(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator,
           p_min: float) -> tuple[int, Dist | None, float]:
    """The next draft token, the q it came from (None at T = 0), and the draft's confidence.

    Confidence is measured here only at T = 0, where it predicts acceptance (the target must
    pick the same argmax); when sampling it is 1.0 and K = auto goes by the measured acceptance
    per position, unless a plan prices each token by q(d) (`DraftModelDrafter.propose`).
    Every drafter that runs a network drafts this way.

    q goes through the target's processing, logit bias and grammar included; under a grammar,
    `cfg.constraint` is the drafter's own copy (see `speculative._propose`) and is advanced past
    the token chosen, so the next one is constrained after it.
    """
    try:
        if cfg.greedy:
            confidence = 1.0
            if p_min > 0.0:
                confidence = sampling.distribution(logits, _confidence_config(cfg)).top_prob()
            token, q = sampling.greedy(logits, cfg), None
        else:
            q = sampling.distribution(logits, cfg)
            token, confidence = sampling.sample(q, rng), 1.0
    except sampling.NoTokenAllowed:
        return 0, None, NOTHING_ALLOWED
    if cfg.constraint is not None:
        cfg.constraint.accept(token)
    return token, q, confidence


def _confidence_config(cfg: SamplingConfig) -> SamplingConfig:
    """GREEDY_CONFIDENCE, with the reply's logit bias and grammar."""
    if not cfg.logit_bias and cfg.constraint is None:
        return GREEDY_CONFIDENCE
    return replace(GREEDY_CONFIDENCE, logit_bias=cfg.logit_bias, constraint=cfg.constraint)


def _more(q: Dist, rng: np.random.Generator, sampled: bool) -> Callable[[list[int]], Candidate | None]:
    """Later candidates for one position: when sampling, drawn from q without the tokens drawn
    before (each with the q it came from, as the tree rule needs); greedy, the next likeliest."""

    def next_candidate(drawn: list[int]) -> Candidate | None:
        rest = sampling.without(q, drawn)
        if rest is None:
            return None
        token = sampling.sample(rest, rng) if sampled else int(rest.ids[0])
        return token, (rest if sampled else None), q.prob(token)

    return next_candidate


def unavailable(spec: DrafterSpec, ctx: BuildContext) -> str | None:
    """A draft file that is an MTP assistant or an EAGLE-3 / DFlash head (they only run against the
    target's context) is not a draft model."""
    from spectui.engine.files import gguf_file
    from spectui.engine.files.archs import FEATURE_HEAD_ARCHS, MTP_ASSISTANT_ARCHS, a_head

    assert spec.draft is not None
    arch = gguf_file.read_metadata(spec.draft).get("general.architecture")
    if arch in MTP_ASSISTANT_ARCHS:
        return f"{spec.draft.name} is an MTP assistant ({arch}), not a draft model: it drafts as --drafter mtp"
    if arch in FEATURE_HEAD_ARCHS:
        return f"{spec.draft.name} is {a_head(arch)}, not a draft model: it drafts as --drafter {arch}"
    return None


def build(spec: DrafterSpec, ctx: BuildContext) -> DraftModelDrafter:
    """Load the draft GGUF beside the target and check it can propose for it."""
    from spectui.engine.files.compat import check_compatible

    assert spec.draft is not None
    n_gpu_layers = ctx.target_n_gpu_layers if spec.draft_n_gpu_layers is None else spec.draft_n_gpu_layers
    # A draft goes back by state checkpoints, never by snapshots: it keeps none (rollback_depth=0).
    draft = LlamaModel.load(spec.draft, n_ctx=ctx.n_ctx, n_gpu_layers=n_gpu_layers,
                            n_threads=ctx.n_threads, progress=ctx.progress, rollback_depth=0)
    try:
        check_compatible(ctx.target, draft, target_name=ctx.target.path.name, draft_name=draft.path.name)
        if draft.speculation_blocker:
            raise UnsupportedModelError(
                f"the draft {draft.path.name} (arch {draft.arch}) cannot roll back its recurrent state; "
                "pick another draft or run without --draft"
            )
    except BaseException:
        draft.close()
        raise
    return DraftModelDrafter(draft)
