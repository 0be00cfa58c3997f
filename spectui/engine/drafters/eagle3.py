"""The EAGLE-3 drafter: a one-layer head that drafts from the target's own hidden states.

An EAGLE-3 head (arch `eagle3`, its own GGUF) reads the inputs of three target layers at every
position. Its encoder fuses them into one row per position, g_p = fc(f_p); its single decoder
layer then holds, at head position P, the pair (t_{P+1}, g_P) and predicts t_{P+2}. Like any
drafter it proposes from its own distribution q (its argmax at T = 0), and the step's rejection
sampling keeps the output exact; llama.cpp's own driver only compares the head's argmax with the
target's sample, so at T > 0 it loses most drafts that rejection sampling keeps.

The call sequence is llama.cpp's `common_speculative_impl_draft_eagle3`
(common/speculative.cpp:455-921), written again around spectui's step:

1. Load: the head's GGUF, checked against the target (`heads.misfit`: three layers, the target's
   width; `compat`: the tokenizer); its context with `ctx_other` = the target's context
   (`feature_head`); the taps `llama_set_embeddings_layer_inp(target, layer, true)` for its three
   layers (`taps`, speculative.cpp:538-547); `llama_set_embeddings_nextn(head, true, masked)`
   for the encoder's output and the decoder's pre-norm state (:551).
2. After every target decode (a `LlamaModel` decode listener, like speculative.cpp's `process`,
   :585-745): the three tapped rows of every decoded token are copied, concatenated per position
   (f_p), and each token t_p is queued. The queue is read before the next draft (or at once past
   32 entries, a prompt): one encoder pass over the rows it needs (g_{p-1} for each queued t_p,
   and g_{n-1} for the draft), then one decoder pass writing the pairs (t_p, g_{p-1}) at head
   positions p - 1, no outputs (the decoder has no output selection: `feature_head`'s note).
   Only rows the target kept after a verify are read.
3. Draft (:747-853): drop the head's cache from n - 1 (n = len(context) - 1, the position of
   `last`), one single-row pass over (last, g_{n-1}) at n - 1 gives d_1 and the head's pre-norm
   state h; each further token chains: (d_i, h) at n - 1 + i.
4. Verify is the ordinary step; the kept rows arrive through step 2 (llama.cpp's `accept`,
   :855-869, moves its deferred boundary row by hand).

Rollback needs nothing on the head: a target decode from position p drops the queue, the rows
and (at the next read) the head's cache from p - 1 on, and a deep rewind of a hybrid target (a
checkpoint, then decoding again) replays its tokens through step 2, which is why the row before
each target checkpoint is kept (llama.cpp's `get_state`/`set_state` stash, :880-919).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from spectui.engine.drafters.feature_head import FeatureHeadContext, load_head, not_this_head
from spectui.engine.drafters.follower import TargetFollower
from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.model import choose
from spectui.engine.drafters.mtp_context import HiddenRows
from spectui.engine.drafters.spec import BuildContext, DrafterSpec
from spectui.engine.drafters.taps import FeatureTaps
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Budget, Proposal

SOURCE = "eagle3"
KIND = KINDS[SOURCE]
FLUSH_ROWS = 32
"""Queued target tokens read into the head as soon as there are this many (a prompt, or a stretch
with another drafter); fewer wait for the next draft."""
ROW_WINDOW = 64
"""Target feature rows kept behind the newest position (more than FLUSH_ROWS + a verify pass)."""


class Eagle3Drafter(TargetFollower[int]):
    """Proposes tokens from an EAGLE-3 head's own distribution q, reading the target's features;
    queued: each token t_p whose pair (t_p, g_{p-1}) the head has not read yet."""

    source = SOURCE
    max_k = KIND.max_k
    """The head chains on its own state with no fixed limit; K = auto finds where it stops paying."""

    def __init__(self, target: LlamaModel, model: LlamaModel, head: FeatureHeadContext, taps: FeatureTaps) -> None:
        self.model = model
        self.head = head
        self.taps = taps
        self.label = f"{KIND.label} {model.path.name}"
        self.rows = HiddenRows(taps.width, ROW_WINDOW)
        """f_p: the target's tapped rows by position (encoded only when a pair needs them)."""
        self.follow(target)

    # ----- following the target --------------------------------------------------------------

    def _on_target_decode(self, start: int, tokens: Sequence[int]) -> None:
        end = start + len(tokens)
        self.rows.drop_from(start)
        self.drop_queued_from(start)
        features = self.taps.rows(len(tokens))
        self.queue.extend((start + i, int(t)) for i, t in enumerate(tokens) if start + i >= 1)
        if len(self.queue) >= FLUSH_ROWS:
            self._read_queue(end, block=features, block_start=start)
        self.rows.put(start, features, end, [c - 1 for c in self.target.checkpoint_positions])

    def _read_queue(self, upto: int, draft_row: int | None = None, block: np.ndarray | None = None,
                    block_start: int = 0) -> tuple[np.ndarray | None, int]:
        """Write the queued pairs of tokens before `upto` into the head's cache; encode the
        feature row `draft_row` with them. Returns its g (or None) and the passes run."""
        ready = self.take_queued(upto)
        passes, g_draft, room = 0, None, self.head.n_batch - 1
        for first in range(0, max(len(ready), 1), room):
            chunk = ready[first : first + room]
            last_chunk = first + room >= len(ready)
            wanted = [pos - 1 for pos, _ in chunk] + ([draft_row] if last_chunk and draft_row is not None else [])
            if not wanted:
                break
            self.head.embed(None, np.stack([self.rows.row(p, block, block_start) for p in wanted]))
            g = self.head.hidden(len(wanted))
            passes += 1
            if chunk:
                self.head.drop_from(chunk[0][0] - 1)
                self.head.decode([(pos - 1, token, g[i]) for i, (pos, token) in enumerate(chunk)])
                passes += 1
            if len(wanted) > len(chunk):
                g_draft = g[-1]
        self.head_passes += passes
        return g_draft, passes

    # ----- the Drafter protocol ----------------------------------------------------------------

    def prefill(self, context: Sequence[int]) -> None:
        self._read_queue(len(context))

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal(source=SOURCE)
        k = min(budget.k(SOURCE), self.max_k)
        n = len(context) - 1  # the position of `last`, which the target has not decoded
        if k <= 0 or n < 1 or len(self.target.cached) < n or not self.rows.has(n - 1):
            return proposal
        p_min = budget.p_min(SOURCE)
        proposal.caught_up = self.catch_up(n)
        g_last, proposal.work = self._read_queue(n, draft_row=n - 1)
        self.head.drop_from(n - 1)  # earlier drafts
        token, pos, row = context[-1], n - 1, g_last
        while True:
            self.head.decode([(pos, token, row)], output="last")
            proposal.work += 1
            self.head_passes += 1
            row = self.head.hidden(1)[0]  # the pre-norm state: the next pass's g
            token, dist, confidence = choose(self.head.logits(0), cfg, rng, p_min)
            if confidence < p_min:
                break  # unsure: a likely rejection costs more than it saves
            proposal.add(token, dist, confidence)
            if self.draft_ends(proposal, k, budget, context):
                break
            pos += 1
        return proposal

    def reset(self) -> None:
        self.queue.clear()
        self.rows.clear()
        self.head.clear()

    def close(self) -> None:
        self.unfollow()
        if self.target.context_handle:
            self.taps.close()
        self.head.close()
        self.model.close()


# ----- what the registry asks of this kind ------------------------------------------------------


def unavailable(spec: DrafterSpec, ctx: BuildContext) -> str | None:
    """Why these models cannot draft with an EAGLE-3 head, in one line; None when they may (a head
    that does not fit the target is refused by `build`, in one line)."""
    return not_this_head(spec, "eagle3")


def build(spec: DrafterSpec, ctx: BuildContext) -> Eagle3Drafter:
    target = ctx.target
    model, facts = load_head(spec, ctx)
    head = taps = None
    try:
        head = FeatureHeadContext(model.model_handle, target.context_handle, n_ctx=target.n_ctx,
                                  n_batch=target.n_batch, n_threads=ctx.n_threads or os.cpu_count() or 1,
                                  name=model.path.name, hidden=True)
        taps = FeatureTaps(target.context_handle, facts.target_layers, facts.target_hidden_size)
        return Eagle3Drafter(target, model, head, taps)
    except BaseException:
        if head is not None:
            head.close()
        model.close()
        raise
