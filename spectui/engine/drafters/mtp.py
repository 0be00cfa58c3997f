"""The MTP drafter: the target's own multi-token-prediction heads, or a Gemma 4 assistant sidecar.

An MTP head predicts the token after next from the target's hidden state: at position p it reads
the token t_p and the target's hidden row h_{p-1} (the state that predicted t_p), and its output
predicts t_{p+1}. Like any drafter it proposes from its own distribution q (its argmax at T = 0),
and the step's rejection sampling keeps the output exact.

The call sequence (llama.cpp's `common_speculative_impl_draft_mtp`, common/speculative.cpp:1331-
1745, written again here around spectui's step):

1. Load: the target with `load_mtp` (its nextn layers, else llama.cpp skips them), via this
   module's `target_options`. Then a second context on the target's model (or on the sidecar)
   with `ctx_type = LLAMA_CONTEXT_TYPE_MTP`, `ctx_other` = the target's context, `n_rs_seq` 0
   (speculative.cpp:2524-2535). For qwen35/qwen35moe llama.cpp gives it a plain attention KV
   cache holding only the nextn layer (src/llama-model.cpp:2661-2664, 2793, 2799-2800), so the head
   rolls back by `llama_memory_seq_rm` at any position, whatever the target's recurrent state does.
   `llama_set_embeddings_nextn(target, true, masked=false)`: the target writes its hidden row for
   every token; `(head, true, masked=true)`: the head only for its output rows (1417-1418).
2. After every target decode (a `LlamaModel` decode listener, like speculative.cpp's `process`
   hook, 1475-1582): the target's rows h are copied. The head's own cache must hold, at every
   position p the target holds, the head pass over (t_p, h_{p-1}), so each decoded token is
   queued with its position and read into the head's cache in one batched pass (`llama_process`)
   before the next draft, or at once when the queue grows long (a prompt). Rows of a verify pass
   that the target then drops are never read: only the kept ones, [last, d_1..d_accepted].
3. Draft (1584-1731): drop the head's cache from n = len(context) - 1 on, then one head pass over
   (last, h_{n-1}) at position n gives d_1; each further token chains the head on its own hidden
   row: (d_i, h_head) at n + i. A Gemma 4 assistant reads the target's cache instead of keeping
   one (`llama_get_ctx_other(head) == target`): nothing is queued, and all its passes sit at
   position n (1697-1705).
4. Verify: the step's target pass; its rows arrive through step 2. (llama.cpp's `accept`, 1733-
   1745, picks the row of the last accepted token as the next draft's h; here that is simply the
   row at position n - 1 of the next cycle.)

Rollback needs no snapshots on the head: a target decode from position p drops the head's queue,
rows and cache from p on, and a deep rewind of a hybrid target (checkpoint, then decoding again)
replays its tokens through step 2, which is why the row before each target checkpoint is kept.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spectui.engine.drafters.follower import TargetFollower
from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.model import choose
from spectui.engine.drafters.mtp_context import HeadContext, HiddenRows, missing_support
from spectui.engine.drafters.spec import AUTO_KIND, BuildContext, DrafterSpec, TargetOptions
from spectui.engine.files.archs import MTP_ASSISTANT_ARCHS, MTP_HEAD_ARCHS
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Budget, Proposal
from spectui.errors import IncompatibleDraftError

SOURCE = "mtp"
KIND = KINDS[SOURCE]
FLUSH_ROWS = 32
"""Queued target tokens read into the head's cache as soon as there are this many (a prompt, or
a stretch with speculation off); fewer wait for the next draft."""
ROW_WINDOW = 64
"""Target hidden rows kept behind the newest position (more than FLUSH_ROWS + a verify pass)."""


class MtpDrafter(TargetFollower[int]):
    """Proposes tokens from an MTP head's own distribution q, reading the target's hidden rows;
    queued: each token the target decoded that the head's cache has not read yet."""

    source = SOURCE
    max_k = KIND.max_k
    """A single head chains on its own hidden row with no fixed limit (llama.cpp's single-head
    mode); K = auto finds where its acceptance stops paying."""

    def __init__(self, target: LlamaModel, head: HeadContext, label: str, sidecar: LlamaModel | None = None) -> None:
        self.head = head
        self.label = label
        self.sidecar = sidecar
        self.rows = HiddenRows(head.n_embd, ROW_WINDOW)
        self.follow(target)

    # ----- following the target --------------------------------------------------------------

    def _on_target_decode(self, start: int, tokens: Sequence[int]) -> None:
        end = start + len(tokens)
        self.rows.drop_from(start)
        self.drop_queued_from(start)
        rows = self.head.target_rows(self.target.context_handle, len(tokens))
        if rows is None:
            return
        if not self.head.shares_target_cache:
            self.queue.extend((start + i, int(t)) for i, t in enumerate(tokens))
            if len(self.queue) >= FLUSH_ROWS:
                self._read_queue(end, rows, start)
        anchors = [c - 1 for c in self.target.checkpoint_positions]
        self.rows.put(start, rows, end, anchors)

    def _read_queue(self, upto: int, block: np.ndarray | None = None, block_start: int = 0) -> int:
        """Read the queued tokens before `upto` into the head's cache; return the head passes."""
        ready = self.take_queued(upto)
        passes = 0
        for first in range(0, len(ready), self.head.n_batch):
            chunk = ready[first : first + self.head.n_batch]
            self.head.drop_from(chunk[0][0])
            entries = [(pos, token, self.rows.row(pos - 1, block, block_start)) for pos, token in chunk]
            self.head.run(entries, output_last=False)
            passes += 1
        self.head_passes += passes
        return passes

    # ----- the Drafter protocol ----------------------------------------------------------------

    def prefill(self, context: Sequence[int]) -> None:
        self._read_queue(len(context))

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal(source=SOURCE)
        k = min(budget.k(SOURCE), self.max_k)
        n = len(context) - 1  # the position of `last`, which the target has not decoded
        if k <= 0 or len(self.target.cached) < n or not self.rows.has(n - 1):
            return proposal
        p_min = budget.p_min(SOURCE)
        proposal.caught_up = self.catch_up(n)
        proposal.work = self._read_queue(n)
        if self.head.shares_target_cache:
            self.target.truncate(n)  # the assistant attends to exactly the target's cache
        else:
            self.head.drop_from(n)  # earlier drafts and rejected rows
        token, pos, row = context[-1], n, self.rows.get(n - 1)
        while True:
            self.head.run([(pos, token, row)], output_last=True)
            proposal.work += 1
            self.head_passes += 1
            logits, row = self.head.head_output()
            token, dist, confidence = choose(logits, cfg, rng, p_min)
            if confidence < p_min:
                break  # unsure: a likely rejection costs more than it saves
            proposal.add(token, dist, confidence)
            if self.draft_ends(proposal, k, budget, context):
                break
            pos = n if self.head.shares_target_cache else pos + 1
        return proposal

    def reset(self) -> None:
        self.queue.clear()
        self.rows.clear()
        self.head.clear()

    def close(self) -> None:
        self.unfollow()
        self.head.close(self.target.context_handle)
        if self.sidecar is not None:
            self.sidecar.close()


# ----- what the registry asks of this kind ------------------------------------------------------


def _arch_of(path: Path) -> str:
    from spectui.engine.files import gguf_file

    arch = gguf_file.read_metadata(path).get("general.architecture")
    return arch if isinstance(arch, str) else "?"


def _head_layers(path: Path) -> tuple[str, int]:
    from spectui.engine.files import gguf_file

    meta = gguf_file.read_metadata(path)
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else "?"
    layers = meta.get(f"{arch}.nextn_predict_layers")
    return arch, layers if isinstance(layers, int) and not isinstance(layers, bool) else 0


def wanted(spec: DrafterSpec) -> bool:
    return spec.kind == AUTO_KIND or SOURCE in spec.members


def target_options(spec: DrafterSpec, target: Path) -> TargetOptions:
    """`load_mtp` when this run may draft with the target's own heads (asked before it loads)."""
    if not wanted(spec) or spec.draft is not None or missing_support():
        return {}
    arch, layers = _head_layers(target)
    return {"load_mtp": True} if layers == 1 and arch in MTP_HEAD_ARCHS else {}


def unavailable(spec: DrafterSpec, ctx: BuildContext) -> str | None:
    """Why these models cannot draft with MTP, in one line; None when they can."""
    if why := missing_support():
        return why
    target = ctx.target
    if spec.draft is not None:
        arch = _arch_of(spec.draft)
        if arch not in MTP_ASSISTANT_ARCHS:
            if spec.kind == AUTO_KIND:
                return f"the draft model {spec.draft.name} was named; --drafter mtp uses the target's heads instead"
            return (f"{spec.draft.name} is not an MTP assistant (architecture {arch}); name its mtp-*.gguf "
                    "sidecar, or leave out --draft to use the target's own heads")
        if target.arch not in MTP_ASSISTANT_ARCHS[arch]:
            made_for = ", ".join(sorted(MTP_ASSISTANT_ARCHS[arch]))
            return f"{spec.draft.name} drafts for {made_for} targets, not {target.arch}"
        return None
    import llama_cpp

    arch, layers = target.arch, llama_cpp.llama_model_n_layer_nextn(target.model_handle)
    if layers <= 0:
        return (f"{target.path.name} carries no MTP heads ({arch}.nextn_predict_layers is 0 or missing); "
                "use a GGUF published with its MTP layers (an -MTP-GGUF repo) or pass --draft")
    if arch not in MTP_HEAD_ARCHS:
        return f"llama.cpp cannot run the MTP layers of a {arch} model"
    if layers > 1:
        return f"{target.path.name} has {layers} chained MTP heads; spectui drafts with a single head only"
    if not target.mtp_loaded:
        return f"{target.path.name} was loaded without its MTP layers"
    return None


def build(spec: DrafterSpec, ctx: BuildContext) -> MtpDrafter:
    """A head context on the target's model, or on the assistant sidecar `spec.draft`."""
    import llama_cpp

    target = ctx.target
    threads = ctx.n_threads or os.cpu_count() or 1
    sidecar = None
    if spec.draft is not None:
        n_gpu_layers = ctx.target_n_gpu_layers if spec.draft_n_gpu_layers is None else spec.draft_n_gpu_layers
        sidecar = LlamaModel.load(spec.draft, n_ctx=0, n_gpu_layers=n_gpu_layers, progress=ctx.progress)
    model = sidecar.model_handle if sidecar else target.model_handle
    try:
        width = llama_cpp.llama_model_n_embd_out(model)
        if width != llama_cpp.llama_model_n_embd_out(target.model_handle):
            raise IncompatibleDraftError(
                f"{spec.draft.name if spec.draft else 'the MTP head'} reads hidden states {width} wide, "
                f"but {target.path.name} writes them {llama_cpp.llama_model_n_embd_out(target.model_handle)} "
                "wide; pick the assistant published for this model size"
            )
        head = HeadContext(model, target.context_handle, n_ctx=target.n_ctx, n_batch=target.n_batch,
                           n_threads=threads, name=(spec.draft or target.path).name)
    except BaseException:
        if sidecar is not None:
            sidecar.close()
        raise
    label = f"MTP assistant {spec.draft.name}" if spec.draft else KIND.label
    return MtpDrafter(target, head, label, sidecar)
