"""The DFlash drafter: a block-diffusion head that drafts a whole block in one pass from the
target's hidden states.

A DFlash head (arch `dflash`, its own GGUF) keeps the target's features in its KV cache: the
inputs of a few target layers at each position p, fused by `fc` and a norm, become the K and V
of position p in every head layer (an embedding-only "injection" pass). To draft after `last`
at position n it decodes one block [last, MASK, ..., MASK] at n, n + 1, ..., n + k, attending to
the injected features and to the whole block at once (non-causal unless the GGUF says
`dflash.attention.causal`); row i's logits name the token at n + i. Each d_i is drawn from that
row's q_i, which depends on the context only (not on d_1..d_{i-1}): a proposal distribution like
any other, so the step's rejection sampling is exact with it. llama.cpp's driver takes each
row's argmax and keeps it only where the target's own sample matches.

The call sequence is llama.cpp's `common_speculative_impl_draft_dflash`
(common/speculative.cpp:923-1329), written again around spectui's step:

1. Load: the head's GGUF, checked against the target (`heads.misfit`: its width is the target's,
   the layers exist and are tapped, a mask token, a plain DFlash head, not DSpark/DFlash2); its
   context with `ctx_other` and causal attention off (`feature_head`); the taps for its layers
   (:1057-1059). Its block size caps a draft at block_size - 1 tokens (:1022-1031).
2. After every target decode (a `LlamaModel` decode listener, like `process`, :1085-1165): the
   tapped rows of every decoded token are copied and queued by position. The queue is injected
   before the next draft (or at once past 32 entries): one embedding-only decoder pass per
   n_batch positions, after dropping the head's cache from the first of them. Rows the target
   drops after a verify are never injected.
3. Draft (:1167-1322): drop the head's cache from n (the previous block), decode the block with
   every row output (the decoder selects no output rows: `feature_head`'s note), read rows 1..k.
4. Verify is the ordinary step (llama.cpp's `accept` is a no-op, :1324).

Rollback needs nothing on the head: a target decode from position p drops the queue from p, and
the next injection drops the head's cache from p before writing; a deep rewind of a hybrid
target decodes its tokens again, which queues their features again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from spectui.engine.drafters.feature_head import FeatureHeadContext, load_head, not_this_head
from spectui.engine.drafters.follower import TargetFollower
from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.model import choose
from spectui.engine.drafters.spec import BuildContext, DrafterSpec
from spectui.engine.drafters.taps import FeatureTaps
from spectui.engine.files.heads import HeadFacts
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Budget, Proposal
from spectui.engine.step.sampling import Dist

SOURCE = "dflash"
FLUSH_ROWS = 32
"""Queued feature rows injected as soon as there are this many; fewer wait for the next draft."""


class DFlashDrafter(TargetFollower[np.ndarray]):
    """Proposes a block of tokens from a DFlash head's per-row distributions q_i; queued: the
    target's tapped rows f_p, not yet injected into the head's cache."""

    source = SOURCE

    def __init__(self, target: LlamaModel, model: LlamaModel, head: FeatureHeadContext, taps: FeatureTaps,
                 facts: HeadFacts) -> None:
        self.model = model
        self.head = head
        self.taps = taps
        self.mask = int(facts.mask_token or 0)
        kind = KINDS[self.source]
        self.max_k = max(1, min(kind.max_k, facts.max_draft))
        """One block: block_size - 1 tokens after `last` (DSpark's anchor-first block: block_size)."""
        self.label = f"{kind.label} {model.path.name}"
        self.follow(target)

    # ----- following the target --------------------------------------------------------------

    def _on_target_decode(self, start: int, tokens: Sequence[int]) -> None:
        self.drop_queued_from(start)
        features = self.taps.rows(len(tokens))
        self.queue.extend((start + i, features[i]) for i in range(len(tokens)))
        if len(self.queue) >= FLUSH_ROWS:
            self._inject(start + len(tokens))

    def _inject(self, upto: int) -> int:
        """Write the queued features of positions before `upto` into the head's cache; return the
        passes run."""
        ready = self.take_queued(upto)
        passes = 0
        for first in range(0, len(ready), self.head.n_batch):
            chunk = ready[first : first + self.head.n_batch]
            self.head.drop_from(chunk[0][0])
            self.head.embed(chunk[0][0], np.stack([row for _, row in chunk]))
            passes += 1
        self.head_passes += passes
        return passes

    # ----- the Drafter protocol ----------------------------------------------------------------

    def prefill(self, context: Sequence[int]) -> None:
        self._inject(len(context))

    first_row = 1
    """The block row that drafts the token at n + 1 (DFlash: row 0 is `last` itself)."""
    block_output = "all"
    """Which block rows output logits (DFlash2 reads its lattice from the hidden rows instead)."""

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal(source=self.source)
        k = self.decode_block(context, budget, proposal)
        if k > 0:
            self.read_block(proposal, k, context, budget, cfg, rng)
        return proposal

    def decode_block(self, context: Sequence[int], budget: Budget, proposal: Proposal) -> int:
        """Inject what is queued and decode the block [last, MASK, ...] at n = len(context) - 1:
        `first_row` + k entries; return k, the tokens the block may draft (0: no block)."""
        k = min(budget.k(self.source), self.max_k, self.head.n_batch - self.first_row)
        n = len(context) - 1  # the position of `last`, which the target has not decoded
        if k <= 0 or len(self.target.cached) < n:
            return 0
        proposal.caught_up = self.catch_up(n)
        proposal.work = self._inject(n)
        self.head.drop_from(n)  # the previous block
        block = [(n + i, self.mask if i else context[-1], None) for i in range(self.first_row + k)]
        self.head.decode(block, output=self.block_output)
        proposal.work += 1
        self.head_passes += 1
        return k

    def read_block(self, proposal: Proposal, k: int, context: Sequence[int], budget: Budget,
                   cfg: SamplingConfig, rng: np.random.Generator) -> None:
        """Draft up to k tokens from the decoded block, row by row, while the head is sure enough."""
        p_min = budget.p_min(self.source)
        for i in range(self.first_row, self.first_row + k):
            token, dist, confidence = self.choose_row(i, [context[-1], *proposal.tokens], cfg, rng, p_min)
            if confidence < p_min:
                break  # unsure: a likely rejection costs more than it saves
            proposal.add(token, dist, confidence)
            if self.draft_ends(proposal, k, budget, context):
                break

    def choose_row(self, i: int, previous: Sequence[int], cfg: SamplingConfig, rng: np.random.Generator,
                   p_min: float) -> tuple[int, Dist | None, float]:
        """Block row i's token, the q it was drawn from and the head's confidence in it; `previous`:
        `last` and the tokens drafted before it (DFlash's rows read no previous token)."""
        return choose(self.head.logits(i), cfg, rng, p_min)

    def reset(self) -> None:
        self.queue.clear()
        self.head.clear()

    def close(self) -> None:
        self.unfollow()
        if self.target.context_handle:
            self.taps.close()
        self.head.close()
        self.model.close()


# ----- what the registry asks of this kind ------------------------------------------------------


def unavailable(spec: DrafterSpec, ctx: BuildContext) -> str | None:
    """Why these models cannot draft with a DFlash head, in one line; None when they may (a head
    that does not fit the target is refused by `build`, in one line)."""
    return not_this_head(spec, "dflash")


def build(spec: DrafterSpec, ctx: BuildContext) -> DFlashDrafter:
    model, head, taps, facts = build_head(spec, ctx)
    return DFlashDrafter(ctx.target, model, head, taps, facts)


def build_head(spec: DrafterSpec, ctx: BuildContext, *, lattice: bool = False,
               ) -> tuple[LlamaModel, FeatureHeadContext, FeatureTaps, HeadFacts]:
    """The head's model (checked against the target), its context and the target's taps, which
    every DFlash kind (dflash, dspark, dflash2) drafts with; `lattice`: DFlash2's selector output
    (every row's `t_h_nextn`, unmasked, speculative.cpp:1077). A DSpark confidence head's output
    is `t_h_nextn` of the output rows (dflash.cpp:381-387), so such a head's context keeps it."""
    target = ctx.target
    model, facts = load_head(spec, ctx)
    head = None
    try:
        head = FeatureHeadContext(model.model_handle, target.context_handle, n_ctx=target.n_ctx,
                                  n_batch=target.n_batch, n_threads=ctx.n_threads or os.cpu_count() or 1,
                                  name=model.path.name, causal=facts.causal,
                                  hidden=lattice or facts.confidence_head)
        if lattice:
            head.unmask_hidden()
        width = facts.n_embd  # a DFlash head is as wide as the target (heads.misfit)
        taps = FeatureTaps(target.context_handle, facts.target_layers, width)
        return model, head, taps, facts
    except BaseException:
        if head is not None:
            head.close()
        model.close()
        raise
