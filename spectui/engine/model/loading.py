"""Opening a GGUF with llama.cpp: the model's load parameters, its progress and cancel, the file
watched from before it is mapped, and the context's parameters (`LlamaModel.load` drives these).

Every failure is one line: a missing or damaged file (`gguf_file.diagnose` says why llama.cpp
refused it), a cancelled load, a context there is no memory for, a worker lost while the
weights were on their way.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp

from spectui.engine.files import gguf_file
from spectui.engine.llama.backend import gpu_offload_available, init_backend
from spectui.engine.llama.buffers import MAX_LOGIT_ROWS
from spectui.engine.llama.build_info import cpu_extra_buffers_usable
from spectui.engine.model.loaded_file import LoadedFile
from spectui.errors import LoadCancelled, ModelLoadError

if TYPE_CHECKING:
    from _ctypes import CFuncPtr

    from spectui.engine.rpc import RpcCluster

ProgressCallback = Callable[[float], bool | None]
"""Receives the load's progress, 0..1; returning False cancels the load (`LoadCancelled`)."""


def load_weights(file: Path, *, n_gpu_layers: int | None, vocab_only: bool, progress: ProgressCallback | None,
                 rpc: RpcCluster | None, load_mtp: bool) -> tuple[llama_cpp.llama_model_p, int, LoadedFile | None]:
    """llama.cpp's model for `file`, the layers it offloads, and the file as it was before
    llama.cpp mapped it (None for a vocabulary-only load). See `LlamaModel.load`."""
    gguf_file.check_readable(file)
    init_backend()
    if n_gpu_layers is None:
        n_gpu_layers = -1 if rpc is not None or gpu_offload_available() else 0
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    params.use_extra_bufts = cpu_extra_buffers_usable()
    if rpc is not None:
        rpc.apply(params)
    params.vocab_only = vocab_only
    if load_mtp:
        params.load_mtp = True
    cancelled: list[bool] = []
    keep_alive = None
    if progress is not None:
        keep_alive = _progress_callback(progress, cancelled)
        params.progress_callback = keep_alive
    watch = None if vocab_only else _watch(file)
    model = llama_cpp.llama_model_load_from_file(str(file).encode(), params)
    del keep_alive
    if not model and watch is not None:
        watch.close()
    if not model and rpc is not None:
        rpc.check()
    if not model and cancelled:
        raise LoadCancelled(f"loading {file.name} was cancelled")
    if not model:
        raise ModelLoadError(f"llama.cpp could not load {file}: {gguf_file.diagnose(file)}")
    return model, n_gpu_layers, watch


def new_context(model: llama_cpp.llama_model_p, name: str, *, n_ctx: int, n_threads: int, n_batch: int,
                n_rs_seq: int, n_seqs: int) -> llama_cpp.llama_context_p:
    """A context of `n_seqs` sequences for a loaded model (`name`: its file's, for the error)."""
    params = llama_cpp.llama_context_default_params()
    params.n_rs_seq = n_rs_seq
    params.n_ctx = n_ctx
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.n_seq_max = n_seqs
    # One buffer for all sequences: the branches of a tree share the prefix's cells, and
    # seq_cp between them is bookkeeping (src/llama-kv-cache.cpp:462-490).
    params.kv_unified = n_seqs > 1
    params.n_outputs_max = MAX_LOGIT_ROWS
    params.n_threads = n_threads
    params.n_threads_batch = n_threads
    params.no_perf = True
    ctx: llama_cpp.llama_context_p | None = llama_cpp.llama_init_from_model(model, params)
    if not ctx:
        raise ModelLoadError(
            f"llama.cpp could not create a {n_ctx}-token context for {name}: "
            "not enough memory; try a smaller --ctx or fewer --n-gpu-layers"
        )
    return ctx


def _watch(file: Path) -> LoadedFile | None:
    """The file's identity before llama.cpp maps it (None when it cannot be opened: llama.cpp's
    own load then says why)."""
    try:
        return LoadedFile(file)
    except OSError:
        return None


def _progress_callback(report: ProgressCallback, cancelled: list[bool]) -> CFuncPtr:
    """Wrap `report` for llama.cpp; a False from it stops the load and is noted in `cancelled`."""

    def on_progress(fraction: float, _user_data: ctypes.c_void_p) -> bool:
        if report(float(fraction)) is False:
            cancelled.append(True)
            return False
        return True

    return llama_cpp.llama_progress_callback(on_progress)
