"""A decode's buffers as Python sees them: the batch's positions, llama.cpp's float rows as numpy
views, how many rows a decode may ask logits for, and who is told of each decode.

Shared by the model (`model/llama_model.py`), the tree in its cache (`model/tree_cache.py`) and the heads that read
hidden states (`drafters/feature_head.py`), below all of them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import cast

import llama_cpp
import numpy as np

from spectui.errors import ModelLoadError
from spectui.limits import MAX_LOOKUP_DRAFT

# The most rows we ever ask logits for in one decode ([last, d_1..d_31]: a lookup's longest
# proposal). llama.cpp sizes its compute buffer for this many output rows: at the default
# (n_batch) a 262k-token vocabulary reserves 512 MiB per context for logits we never request.
MAX_LOGIT_ROWS = MAX_LOOKUP_DRAFT + 1

DecodeListener = Callable[[int, Sequence[int]], None]
"""Called after every decode with (position of its first token, its tokens), while llama.cpp's
output buffers still hold that decode's results (e.g. the MTP drafter reads the hidden rows)."""


def positions(batch: llama_cpp.llama_batch) -> ctypes.Array[ctypes.c_int32]:
    """A batch's `pos` array: llama_pos* in llama.h, mistyped as an array of arrays by
    llama-cpp-python 0.3.36's annotations."""
    return cast("ctypes.Array[ctypes.c_int32]", batch.pos)


class _Memory:
    """Describes llama.cpp's float buffer to numpy (`__array_interface__`) without copying it."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, shape: tuple[int, ...]) -> None:
        self.__array_interface__ = {"shape": shape, "typestr": "<f4", "data": (address, False), "version": 3}


def float_view(pointer: ctypes._Pointer[ctypes.c_float], shape: tuple[int, ...]) -> np.ndarray:
    """A numpy view of `shape` float32s at `pointer` (valid while llama.cpp keeps the buffer).
    `np.ctypeslib.as_array` does the same in ~5-25 us (it builds a ctypes array type each
    call); this in ~1.5 us, paid once per decode by the target and every draft token."""
    address = ctypes.cast(pointer, ctypes.c_void_p).value
    if not address:
        raise ModelLoadError("llama.cpp returned no logits")
    return np.asarray(_Memory(address, shape))
