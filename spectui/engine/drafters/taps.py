"""The target's hidden-state taps: llama.cpp's `llama_set_embeddings_layer_inp` and friends.

EAGLE-3 and DFlash heads read the *input* of a few target layers (layer 0's input is the token
embeddings) at every position the target decodes. llama.cpp exposes them in `src/llama-ext.h`:

    void    llama_set_embeddings_layer_inp(llama_context *, uint32_t lid, bool)   // llama-context.cpp:1237
    float * llama_get_embeddings_layer_inp(llama_context *, uint32_t lid)          // :1042, n_batch rows
    const int32_t * llama_model_target_layer_ids  (const llama_model *)            // the head's ids
    uint32_t        llama_model_target_layer_ids_n(const llama_model *)

They are C++ functions (no `extern "C"`), exported from libllama under their mangled names, and
llama-cpp-python 0.3.36 binds none of them (`llama_cpp_ext` has only the nextn calls), so they
are looked up here by those names, the way `llama_cpp_ext` finds its own. Once enabled, every
decode copies each tapped layer's input for *every* token of the batch (not only the rows that
output logits: `extract_layer_inputs`, llama-context.cpp:2278) into a buffer of n_batch rows,
valid until the next decode.

Two llama.cpp asserts abort the whole process rather than fail a call, so the callers check first:
`set_embeddings_layer_inp` asserts lid <= n_layer (:1240), and a decode with a tap the target's
graph does not fill asserts "layer input tensor is null" (src/llama-graph.cpp:1384): only the
archs in `spectui.engine.files.archs.LAYER_TAP_ARCHS` fill them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

if TYPE_CHECKING:
    from _ctypes import CFuncPtr, _CDataType

# Itanium (Linux, macOS) and MSVC manglings of the src/llama-ext.h declarations; the MSVC names
# follow llama_cpp_ext's pattern and were not tried here (no Windows build).
_SYMBOLS: dict[str, tuple[tuple[str, ...], list[type[_CDataType]], type[_CDataType] | None]] = {
    "llama_set_embeddings_layer_inp": (("_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
                       "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z"),
                      [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None),
    "llama_get_embeddings_layer_inp": (("_Z30llama_get_embeddings_layer_inpP13llama_contextj",
                       "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z"),
                      [ctypes.c_void_p, ctypes.c_uint32], ctypes.POINTER(ctypes.c_float)),
    "llama_model_target_layer_ids": (("_Z28llama_model_target_layer_idsPK11llama_model",
                          "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z"),
                         [ctypes.c_void_p], ctypes.POINTER(ctypes.c_int32)),
    "llama_model_target_layer_ids_n": (("_Z30llama_model_target_layer_ids_nPK11llama_model",
                            "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z"),
                           [ctypes.c_void_p], ctypes.c_uint32),
}
CORE_CALLS = ("llama_process", "llama_batch_ext_init", "llama_batch_ext_add_token", "llama_batch_ext_add_embd",
              "llama_batch_ext_set_pos", "llama_batch_ext_set_embd_token", "llama_batch_ext_set_output_logits",
              "llama_set_causal_attn", "llama_vocab_mask", "LLAMA_PROCESS_TYPE_ENCODE", "llama_embd")
_bound: dict[str, CFuncPtr] = {}


def _find(key: str) -> CFuncPtr | None:
    if key in _bound:
        return _bound[key]
    names, argtypes, restype = _SYMBOLS[key]
    for name in names:
        func: CFuncPtr | None = getattr(llama_cpp.llama_cpp._lib, name, None)
        if func is not None:
            func.argtypes, func.restype = argtypes, restype
            _bound[key] = func
            return func
    return None


def missing_support() -> str | None:
    """Why the installed llama-cpp-python cannot run EAGLE-3 / DFlash heads, in one line."""
    from spectui.engine.drafters.mtp_context import missing_support as missing_mtp

    missing = [name for name in CORE_CALLS if not hasattr(llama_cpp, name)]
    missing += [name for name in _SYMBOLS if _find(name) is None]
    if not missing and (why := missing_mtp()) is None:
        return None
    if not missing:
        return why
    try:
        version = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        version = "?"
    return (f"the installed llama-cpp-python ({version}) lacks llama.cpp's hidden-state taps "
            f"({', '.join(missing[:3])}); install llama-cpp-python 0.3.36 or newer")


def _pointer(handle: int | ctypes.c_void_p) -> ctypes.c_void_p:
    return ctypes.c_void_p(handle.value if isinstance(handle, ctypes.c_void_p) else handle)


def target_layer_ids(model: int) -> list[int]:
    """The head's extract layers as llama.cpp loaded them (`eagle3.target_layers`...)."""
    get, count = _find("llama_model_target_layer_ids"), _find("llama_model_target_layer_ids_n")
    assert get is not None and count is not None
    n = int(count(_pointer(model)))
    ids = get(_pointer(model))
    return [int(ids[i]) for i in range(n)] if n and ids else []


class FeatureTaps:
    """The inputs of `layers` of a target context, concatenated per token after each decode."""

    def __init__(self, ctx: int, layers: Sequence[int], n_embd: int) -> None:
        self.ctx = _pointer(ctx)
        self.layers = list(layers)
        self.n_embd = n_embd
        self.width = n_embd * len(self.layers)
        tap, read = _find("llama_set_embeddings_layer_inp"), _find("llama_get_embeddings_layer_inp")
        assert tap is not None and read is not None
        self._set, self._get = tap, read
        for layer in set(self.layers):
            self._set(self.ctx, layer, True)

    def rows(self, n_tokens: int) -> np.ndarray:
        """[n_tokens, len(layers) * n_embd]: the tapped inputs of the last decode's tokens, in
        `layers` order (a copy: llama.cpp's buffers are overwritten by the next decode)."""
        out = np.empty((n_tokens, self.width), dtype=np.float32)
        for i, layer in enumerate(self.layers):
            data = self._get(self.ctx, layer)
            out[:, i * self.n_embd : (i + 1) * self.n_embd] = np.ctypeslib.as_array(data, shape=(n_tokens, self.n_embd))
        return out

    def close(self) -> None:
        """Stop tapping (the target's next decode no longer copies these rows)."""
        for layer in set(self.layers):
            self._set(self.ctx, layer, False)
        self.layers = []
