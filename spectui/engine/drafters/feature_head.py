"""The llama.cpp side of an EAGLE-3 or DFlash head: its own context beside the target's, and the
batches it runs (token + embedding entries, embedding-only entries).

The head is a separate GGUF with its own context, created with `ctx_other` = the target's context
(llama-context.cpp:156-162: a head without its own `token_embd` or `output` borrows the target's,
and refuses to start without it) and a plain attention KV cache that rolls back by `seq_rm`
anywhere. Entries go in through llama.cpp's extended batch (`llama_batch_ext_*`, include/llama.h:
1011-1090), the way common/common.cpp:2144-2184 builds them.

One trap: neither head's decoder graph selects output rows (no `inp_out_ids` in eagle3.cpp or
dflash.cpp), so llama.cpp copies the *first* n_outputs rows of the logits out
(llama-context.cpp:1958). A pass that wants logits must therefore output every row (DFlash's
block) or be a single row (EAGLE-3's drafting passes), exactly as llama.cpp's drivers do.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from spectui.engine.drafters.mtp_context import head_context_params
from spectui.engine.llama import hostcost
from spectui.engine.llama.buffers import float_view
from spectui.engine.model.llama_model import LlamaModel
from spectui.errors import ModelLoadError

if TYPE_CHECKING:
    from spectui.engine.drafters.spec import BuildContext, DrafterSpec
    from spectui.engine.files.heads import HeadFacts

POSITIONS = 4  # an embedding entry of an M-RoPE head reads 4 positions (llama-batch.cpp:1162)


class FeatureHeadContext:
    """One context on a head model, with its batch and the passes drafting needs."""

    def __init__(self, model: llama_cpp.llama_model_p, target_ctx: llama_cpp.llama_context_p, *,
                 n_ctx: int, n_batch: int, n_threads: int, name: str, causal: bool = True,
                 hidden: bool = False) -> None:
        params = head_context_params(target_ctx, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads)
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if not self.ctx:
            raise ModelLoadError(
                f"llama.cpp could not create a context for the head {name}: not enough memory, or the GGUF "
                "is incomplete; try a smaller --ctx or run without --draft"
            )
        self.n_batch = n_batch
        self.n_embd = llama_cpp.llama_model_n_embd(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._memory = llama_cpp.llama_get_memory(self.ctx)
        self._batch = llama_cpp.llama_batch_ext_init(self.ctx)
        self._pos = (llama_cpp.llama_pos * POSITIONS)()
        self._keep: list[np.ndarray] = []
        if hidden:  # the encoder's output and the decoder's pre-norm state, for output rows only
            from llama_cpp import llama_cpp_ext

            self._ext = llama_cpp_ext
            llama_cpp_ext.llama_set_embeddings_nextn(self.ctx, True, True)
        if not causal:  # DFlash's block attends to itself both ways (speculative.cpp:1063)
            llama_cpp.llama_set_causal_attn(self.ctx, False)

    def unmask_hidden(self) -> None:
        """Hidden rows for every entry of a pass, whether it outputs logits or not (DFlash2's
        lattice, read by raw row)."""
        self._ext.llama_set_embeddings_nextn(self.ctx, True, False)

    # ----- the cache ------------------------------------------------------------------------

    def drop_from(self, pos: int) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, 0, max(pos, 0), -1)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)

    # ----- batches --------------------------------------------------------------------------

    def _embd(self, row: np.ndarray) -> llama_cpp.llama_embd:
        row = np.ascontiguousarray(row, dtype=np.float32)
        self._keep.append(row)  # llama.cpp reads the rows when the batch runs, not when added
        return llama_cpp.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[-1])

    def _place(self, idx: int, pos: int, what: str) -> None:
        for i in range(POSITIONS - 1):
            self._pos[i] = pos
        self._pos[POSITIONS - 1] = 0  # M-RoPE: temporal, height, width = p; the extra section 0
        if idx < 0 or not llama_cpp.llama_batch_ext_set_pos(self._batch, idx, self._pos):
            raise ModelLoadError(f"llama.cpp refused a head batch entry ({what} at position {pos})")

    def _start(self) -> None:
        llama_cpp.llama_batch_ext_clear(self._batch)
        self._keep.clear()

    def _process(self, kind: int, what: str) -> None:
        started = hostcost.now()
        status = llama_cpp.llama_process(self.ctx, kind, self._batch)
        hostcost.add_llama(started)
        self._keep.clear()
        if status != 0:
            raise ModelLoadError(f"the head's {what} pass failed with status {status}")

    def decode(self, entries: Sequence[tuple[int, int, np.ndarray | None]], output: str = "none") -> None:
        """One decoder pass over (position, token, embedding row or None) entries at consecutive
        positions; `output`: "none", "last" (only for a single entry: see the module's note) or "all"."""
        self._start()
        for pos, token, row in entries:
            idx = llama_cpp.llama_batch_ext_add_token(self._batch, 0, token)
            self._place(idx, pos, f"token {token}")
            if row is not None and not llama_cpp.llama_batch_ext_set_embd_token(self._batch, idx, self._embd(row)):
                raise ModelLoadError(f"llama.cpp refused the head's input row at position {pos}")
            if output == "all" or (output == "last" and pos == entries[-1][0]):
                llama_cpp.llama_batch_ext_set_output_logits(self._batch, idx, True)
        self._process(llama_cpp.LLAMA_PROCESS_TYPE_DECODE, "decoder")

    def embed(self, start: int | None, rows: np.ndarray) -> None:
        """Embedding-only entries: at positions start.., a decoder pass that writes them into the
        cache (DFlash's feature injection); with `start` None, an encoder pass (EAGLE-3's fc,
        every row out) whose positions are unused but must follow the cache's, as
        speculative.cpp:687 places them."""
        encode = start is None
        if start is None:
            start = llama_cpp.llama_memory_seq_pos_max(self._memory, 0) + 1
        self._start()
        for i, row in enumerate(rows):
            idx = llama_cpp.llama_batch_ext_add_embd(self._batch, 0, self._embd(row))
            self._place(idx, start + i, "target features")
            if encode:
                llama_cpp.llama_batch_ext_set_output_logits(self._batch, idx, True)
        kind = llama_cpp.LLAMA_PROCESS_TYPE_ENCODE if encode else llama_cpp.LLAMA_PROCESS_TYPE_DECODE
        self._process(kind, "encoder" if encode else "feature")

    # ----- outputs ----------------------------------------------------------------------------

    def logits(self, i: int) -> np.ndarray:
        """The logits of output row `i` (a view, valid until the next pass)."""
        started = hostcost.now()
        first = llama_cpp.llama_get_logits_ith(self.ctx, i)  # waits for an async backend
        hostcost.add_llama(started)
        return float_view(first, (self.n_vocab,))

    def hidden(self, n_rows: int) -> np.ndarray:
        """The head's hidden rows of the last pass (`t_h_nextn`: fc's output after an encode, the
        pre-norm state of the output rows after a decode), copied."""
        rows = self._ext.llama_get_embeddings_nextn(self.ctx)
        if not rows:
            raise ModelLoadError("llama.cpp returned no hidden state from the head")
        return np.ctypeslib.as_array(rows, shape=(n_rows, self.n_embd)).copy()

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None


# ----- what the eagle3 and dflash kinds share when the registry asks --------------------------


def not_this_head(spec: DrafterSpec, kind: str) -> str | None:
    """For a kind's `unavailable`: why these models cannot run the `kind` head (eagle3, dflash,
    dspark, dflash2: missing calls in llama-cpp-python, or a draft file that is not such a head);
    None when they may."""
    from spectui.engine.drafters.taps import missing_support
    from spectui.engine.files.heads import a_head_kind, head_kind

    if why := missing_support():
        return why
    assert spec.draft is not None
    found = head_kind(spec.draft)
    if found == kind:
        return None
    if found is not None:
        return f"{spec.draft.name} is {a_head_kind(found)}: it drafts as --drafter {found}"
    from spectui.engine.files import gguf_file

    actual = gguf_file.read_metadata(spec.draft).get("general.architecture")
    return f"{spec.draft.name} is not {a_head_kind(kind)} (architecture {actual}); name the {kind} GGUF"


def load_head(spec: DrafterSpec, ctx: BuildContext) -> tuple[LlamaModel, HeadFacts]:
    """The head's weights (no context yet), checked against the loaded target: its shape (one
    line saying what does not fit) and its tokenizer (`compat`)."""
    from spectui.engine.files.compat import check_compatible
    from spectui.engine.files.heads import TargetFacts, misfit, read_head
    from spectui.errors import IncompatibleDraftError

    assert spec.draft is not None
    target = ctx.target
    facts = read_head(spec.draft)
    here = TargetFacts(target.arch, llama_cpp.llama_model_n_embd(target.model_handle), target.n_layer)
    if why := misfit(facts, here, spec.draft.name, target.path.name):
        raise IncompatibleDraftError(why)
    n_gpu_layers = ctx.target_n_gpu_layers if spec.draft_n_gpu_layers is None else spec.draft_n_gpu_layers
    model = LlamaModel.load(spec.draft, n_ctx=0, n_gpu_layers=n_gpu_layers, progress=ctx.progress)
    try:
        check_compatible(target, model, target_name=target.path.name, draft_name=spec.draft.name)
    except BaseException:
        model.close()
        raise
    return model, facts
