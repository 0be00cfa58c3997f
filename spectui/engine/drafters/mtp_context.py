"""The llama.cpp side of MTP drafting: the head's own context, and the target's hidden rows.

An MTP head is not a model of its own: it runs in a second llama.cpp context, of type
`LLAMA_CONTEXT_TYPE_MTP`, created on the target's model (heads stored in the target GGUF) or on
a Gemma 4 assistant sidecar (`ctx_other` = the target's context). Each head pass reads one token
*and* one hidden-state row of the target, so a batch entry carries both: llama.cpp's
`llama_batch_ext_set_embd_token` after `llama_batch_ext_add_token`, as common/common.cpp:2156-2163
builds it (`llama_batch_ext_set_embd_state` is a stub that returns false in 0.3.36,
src/llama-batch.cpp:1230-1236).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from importlib import metadata

import llama_cpp
import numpy as np

from spectui.engine.llama import hostcost
from spectui.errors import ModelLoadError

EXT_CALLS = ("llama_set_embeddings_nextn", "llama_get_embeddings_nextn", "llama_get_embeddings_nextn_ith",
             "llama_get_ctx_other")
CORE_CALLS = ("llama_process", "llama_batch_ext_init", "llama_batch_ext_add_token", "llama_batch_ext_set_pos",
              "llama_batch_ext_set_embd_token", "llama_batch_ext_set_output_logits", "llama_model_n_layer_nextn",
              "llama_model_n_embd_out", "LLAMA_CONTEXT_TYPE_MTP", "LLAMA_PROCESS_TYPE_DECODE", "llama_embd")


def missing_support() -> str | None:
    """Why the installed llama-cpp-python cannot draft with MTP heads, in one line; None if it can."""
    missing = [name for name in CORE_CALLS if not hasattr(llama_cpp, name)]
    missing += [f"model param {name}" for name in ("load_mtp",) if not _has_field(llama_cpp.llama_model_params, name)]
    missing += [f"context param {name}" for name in ("ctx_type", "ctx_other")
                if not _has_field(llama_cpp.llama_context_params, name)]
    try:
        from llama_cpp import llama_cpp_ext
    except (ImportError, AttributeError):  # AttributeError: a symbol missing from the library
        missing.append("llama_cpp.llama_cpp_ext")
    else:
        missing += [name for name in EXT_CALLS if not hasattr(llama_cpp_ext, name)]
    if not missing:
        return None
    try:
        version = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        version = "?"
    return (f"the installed llama-cpp-python ({version}) lacks llama.cpp's MTP calls "
            f"({', '.join(missing[:3])}); install llama-cpp-python 0.3.36 or newer")


def _has_field(struct: type[ctypes.Structure], name: str) -> bool:
    return any(field[0] == name for field in struct._fields_)


class HeadContext:
    """One `LLAMA_CONTEXT_TYPE_MTP` context and its batch: runs head passes over (token, row)."""

    def __init__(self, model: llama_cpp.llama_model_p, target_ctx: llama_cpp.llama_context_p, *,
                 n_ctx: int, n_batch: int, n_threads: int, name: str) -> None:
        from llama_cpp import llama_cpp_ext

        self._ext = llama_cpp_ext
        params = head_context_params(target_ctx, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads)
        params.n_outputs_max = 1  # a head pass outputs its last row only
        params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        # ctx_other is read by a Gemma 4 assistant, ignored by MTP heads (llama-context.cpp:144-153)
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if not self.ctx:
            raise ModelLoadError(
                f"llama.cpp could not create the MTP context for {name}: not enough memory, or the "
                "GGUF's MTP layers are incomplete; try a smaller --ctx or run without --drafter mtp"
            )
        self.n_batch = n_batch
        self.n_embd = llama_cpp.llama_model_n_embd_out(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self._memory = llama_cpp.llama_get_memory(self.ctx)
        self._batch = llama_cpp.llama_batch_ext_init(self.ctx)
        self._pos = llama_cpp.llama_pos(0)
        # The target writes every row's hidden state (unmasked); the head only its output rows.
        llama_cpp_ext.llama_set_embeddings_nextn(target_ctx, True, False)
        llama_cpp_ext.llama_set_embeddings_nextn(self.ctx, True, True)
        other = llama_cpp_ext.llama_get_ctx_other(self.ctx)
        self.shares_target_cache = bool(other) and _address(other) == _address(target_ctx)
        """A Gemma 4 assistant: it attends to the target's own KV cache and keeps none."""

    def drop_from(self, pos: int) -> None:
        """Forget the head's cache from `pos` on (a no-op on a shared cache: llama-kv-cache.cpp:382)."""
        llama_cpp.llama_memory_seq_rm(self._memory, 0, pos, -1)

    def clear(self) -> None:
        """Forget the head's cache. Never on a shared cache: llama.cpp's `clear` is not guarded
        there (src/llama-kv-cache.cpp:368-379) and would wipe the target's cells."""
        if not self.shares_target_cache:
            llama_cpp.llama_memory_clear(self._memory, True)

    def run(self, entries: Iterable[tuple[int, int, np.ndarray]], output_last: bool) -> None:
        """One head pass over (position, token, target row) entries, at most n_batch of them."""
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        idx = -1
        for pos, token, row in entries:
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, token)
            self._pos.value = pos
            row = np.ascontiguousarray(row, dtype=np.float32)
            embd = llama_cpp.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
            if idx < 0 or not (llama_cpp.llama_batch_ext_set_pos(batch, idx, ctypes.byref(self._pos))
                               and llama_cpp.llama_batch_ext_set_embd_token(batch, idx, embd)):
                raise ModelLoadError(f"llama.cpp refused an MTP batch entry (token {token} at {pos})")
        if idx < 0:
            return
        if output_last:
            llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
        started = hostcost.now()
        status = llama_cpp.llama_process(self.ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        hostcost.add_llama(started)
        if status != 0:
            raise ModelLoadError(f"the MTP head pass failed with status {status}")

    def head_output(self) -> tuple[np.ndarray, np.ndarray]:
        """After `run(..., output_last=True)`: the head's logits (a view, valid until the next
        pass) and its own hidden row (a copy: the next head pass's input when chaining)."""
        started = hostcost.now()
        first = llama_cpp.llama_get_logits_ith(self.ctx, -1)  # waits for an async backend
        hostcost.add_llama(started)
        logits = np.ctypeslib.as_array(first, shape=(self.n_vocab,))
        hidden = self._ext.llama_get_embeddings_nextn_ith(self.ctx, -1)
        if not hidden:
            raise ModelLoadError("llama.cpp returned no MTP hidden state")
        return logits, np.ctypeslib.as_array(hidden, shape=(self.n_embd,)).copy()

    def target_rows(self, target_ctx: llama_cpp.llama_context_p, n_rows: int) -> np.ndarray | None:
        """The target's hidden rows of its last decode (a view, valid until its next decode)."""
        rows = self._ext.llama_get_embeddings_nextn(target_ctx)
        return np.ctypeslib.as_array(rows, shape=(n_rows, self.n_embd)) if rows else None

    def close(self, target_ctx: llama_cpp.llama_context_p | None) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_ext_free(self._batch)
            self._batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if target_ctx:
            self._ext.llama_set_embeddings_nextn(target_ctx, False, False)


def _address(pointer: int | ctypes.c_void_p | None) -> int:
    value = pointer.value if isinstance(pointer, ctypes.c_void_p) else pointer
    return int(value or 0)


def head_context_params(target_ctx: llama_cpp.llama_context_p, *, n_ctx: int, n_batch: int,
                        n_threads: int) -> llama_cpp.llama_context_params:
    """What every drafting head's own llama.cpp context shares (MTP, EAGLE-3, DFlash): one
    sequence, no recurrent snapshots, a ubatch as large as its batch, the target's context as
    `ctx_other`."""
    params: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = n_batch
    params.n_seq_max = 1
    params.n_rs_seq = 0
    params.n_threads = params.n_threads_batch = n_threads
    params.no_perf = True
    params.ctx_other = target_ctx
    return params


class HiddenRows:
    """The target's hidden rows (its `h_nextn`: the last layer's output after the final norm,
    src/models/qwen35.cpp `res->t_h_nextn`) by position, for the head passes still to come.

    A row is only valid for the tokens it was computed after, so a decode from position p drops
    every row from p on. Kept: the last `window` positions, and the row just before each of the
    target's state checkpoints (a deep rewind restores one and decodes again from there).
    """

    def __init__(self, n_embd: int, window: int) -> None:
        self.n_embd = n_embd
        self.window = window
        self._rows: dict[int, np.ndarray] = {}
        self.missing = 0
        """Head inputs that had no row (zeros went in): counted for tests and diagnostics."""

    def drop_from(self, pos: int) -> None:
        for key in [p for p in self._rows if p >= pos]:
            del self._rows[key]

    def put(self, start: int, rows: np.ndarray, end: int, anchors: Sequence[int]) -> None:
        """Keep copies of the rows (of positions start..) that the window or an anchor needs."""
        keep_from = end - self.window
        for i in range(max(0, keep_from - start), len(rows)):
            self._rows[start + i] = rows[i].copy()
        wanted = set(anchors)
        for key in [p for p in self._rows if p < keep_from and p not in wanted]:
            del self._rows[key]

    def has(self, pos: int) -> bool:
        return pos < 0 or pos in self._rows

    def row(self, pos: int, block: np.ndarray | None = None, block_start: int = 0) -> np.ndarray:
        """The row at `pos`, from `block` (rows of positions `block_start`.. just decoded and not
        stored yet) when it holds it, else as `get` gives it."""
        if block is not None and 0 <= pos - block_start < len(block):
            row: np.ndarray = block[pos - block_start]
            return row
        return self.get(pos)

    def get(self, pos: int) -> np.ndarray:
        """The row at `pos`; zeros before the first token (as llama.cpp's `pending_h` starts,
        common/speculative.cpp:1429) or when the row is gone."""
        row = self._rows.get(pos)
        if row is None:
            self.missing += pos >= 0
            return np.zeros(self.n_embd, dtype=np.float32)
        return row

    def clear(self) -> None:
        self._rows.clear()
