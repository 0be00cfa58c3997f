"""Widening a llama-architecture GGUF: the same function at a bigger model's cost.

A real speculative pair's target costs ten or more draft tokens per token; the `demo` pair's
135M target costs less than two of its draft's, so speculation shows little on it. Widening turns the
small model into a target of real cost that still computes exactly its function:

- hidden size d -> D = f·d, FFN width ff -> f·ff, query and key/value heads x f, head size kept.
  Every matrix holds the original in its first block. llama.cpp maps query head h to key/value
  head h // (n_head / n_head_kv) (the group size is kept), so the original heads keep their groups.
- The new heads and FFN neurons compute (their rows are copies of the original ones, so the work
  is real), but all they write back into the residual stream is zero: `attn_output`'s columns of
  the new heads and `ffn_down`'s of the new neurons are zero, as is every row of a new dimension,
  and so are the token embedding's new columns. The residual stream's new dimensions stay exactly
  0 in every layer, and the logits (the tied embedding, or an output matrix whose new columns meet
  those zeros) are the original's.
- RMSNorm over D sees the same sum of squares divided by D instead of d: each norm weight is scaled
  by sqrt(d/D) and eps by d/D, which gives back the original's normalised values.

Rounding differs (longer dot products, other kernels): logits agree within float rounding, and the
greedy text is the original's (tests/test_widen.py checks both). The source is dequantized with
the `gguf` package's quants module, tensor by tensor, and written as it goes (F16 or F32), so the
memory held is one tensor, not the model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from spectui.errors import CatalogError

if TYPE_CHECKING:
    from gguf import GGUFReader, ReaderField, ReaderTensor

ARCHITECTURES = ("llama",)
"""What `widen` knows the tensors of (llama.cpp's `llama` graph: SmolLM2, Llama 2/3, ...)."""
PRECISIONS = ("F16", "F32")

Log = Callable[[str], None]


class Role(Enum):
    READ = "read"
    """Reads the residual stream (q, k, v, gate, up; an untied output): the original block, the
    rest filled with copies of it (new heads/neurons compute; new input columns meet zeros)."""
    WRITE = "write"
    """Writes into the residual stream (attn_output, ffn_down, the token embedding): the original
    block, zero everywhere else."""
    NORM = "norm"
    """An RMSNorm weight over the residual stream: scaled by sqrt(d/D)."""
    KEEP = "keep"
    """Independent of the width (rope frequencies)."""


_ROLES: dict[str, Role] = {
    "token_embd.weight": Role.WRITE, "output.weight": Role.READ, "output_norm.weight": Role.NORM,
    "rope_freqs.weight": Role.KEEP,
    "attn_norm.weight": Role.NORM, "ffn_norm.weight": Role.NORM,
    "attn_q.weight": Role.READ, "attn_k.weight": Role.READ, "attn_v.weight": Role.READ,
    "ffn_gate.weight": Role.READ, "ffn_up.weight": Role.READ,
    "attn_output.weight": Role.WRITE, "ffn_down.weight": Role.WRITE,
}
_LAYER = re.compile(r"^blk\.\d+\.")
_GROWN_WITH_WIDTH = ("embedding_length", "feed_forward_length", "attention.head_count",
                     "attention.head_count_kv")
_DROPPED = ("general.size_label", "general.alignment")
"""`general.size_label` ("135M") would misdescribe the result; the writer sets its own alignment."""


def role(name: str) -> Role:
    role_ = _ROLES.get(_LAYER.sub("", name))
    if role_ is None:
        raise CatalogError(f"cannot widen tensor {name}: widening knows llama's tensors only")
    return role_


def widen(src: Path, dst: Path, factor: int, precision: str = "F16", log: Log | None = None) -> None:
    """Write `src` widened `factor` times to `dst` in `precision` (F16 or F32).

    Writes `dst` directly (callers write through a temporary name: demo.atomic_write). Raises
    CatalogError with one line for a model it cannot widen.
    """
    from gguf import GGUFReader, GGUFWriter, LlamaFileType

    if factor < 1:
        raise ValueError(f"the factor must be 1 or more, not {factor}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    try:
        reader = GGUFReader(src)
    except (OSError, ValueError) as error:
        raise CatalogError(f"cannot read {src.name} as a GGUF ({error})") from None
    arch = _string(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise CatalogError(f"cannot widen a {arch} model ({src.name}): widening knows {', '.join(ARCHITECTURES)}")
    _check_heads(reader, arch)
    writer = GGUFWriter(dst, arch)
    _copy_metadata(reader, writer, arch, factor, precision)
    writer.add_file_type(LlamaFileType.MOSTLY_F16 if precision == "F16" else LlamaFileType.ALL_F32)
    matrices = np.dtype(np.float16 if precision == "F16" else np.float32)
    plan = []
    for tensor in reader.tensors:
        shape = _wide_shape(tensor, factor)
        dtype = np.dtype(np.float32) if len(shape) == 1 else matrices  # norms stay F32, as llama.cpp keeps them
        writer.add_tensor_info(tensor.name, shape, dtype, math.prod(shape) * dtype.itemsize)
        plan.append((tensor, shape, dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for done, (tensor, shape, dtype) in enumerate(plan, 1):
        writer.write_tensor_data(_widen_tensor(tensor, factor, shape, dtype))
        if log is not None and done * 4 // len(plan) > (done - 1) * 4 // len(plan):
            log(f"widened {done} of {len(plan)} tensors")
    writer.close()


def _field(reader: GGUFReader, key: str) -> ReaderField | None:
    return reader.fields.get(key)


def _string(reader: GGUFReader, key: str) -> str:
    field = _field(reader, key)
    value = field.contents() if field is not None else None
    if not isinstance(value, str):
        raise CatalogError(f"not a model GGUF: no {key}")
    return value


def _int(reader: GGUFReader, key: str) -> int:
    field = _field(reader, key)
    value = field.contents() if field is not None else None
    if isinstance(value, list):  # per-layer values: widening needs them all alike
        if len(set(value)) != 1:
            raise CatalogError(f"cannot widen a model whose {key} differs by layer")
        value = value[0]
    if not isinstance(value, int):
        raise CatalogError(f"cannot widen: the model has no {key}")
    return value


def _check_heads(reader: GGUFReader, arch: str) -> None:
    """Key and value heads of one size (widening keeps it, and llama.cpp's head size with it)."""
    key, value = f"{arch}.attention.key_length", f"{arch}.attention.value_length"
    if _field(reader, key) and _field(reader, value) and _int(reader, key) != _int(reader, value):
        raise CatalogError("cannot widen a model whose key and value heads differ in size")
    _int(reader, f"{arch}.embedding_length")
    _int(reader, f"{arch}.attention.head_count")


def _copy_metadata(reader: GGUFReader, writer: Any, arch: str, factor: int, precision: str) -> None:

    grown = {f"{arch}.{key}" for key in _GROWN_WITH_WIDTH}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type", *_DROPPED):
            continue
        value = field.contents()
        if key in grown:
            value = [v * factor for v in value] if isinstance(value, list) else value * factor
        elif key == f"{arch}.attention.layer_norm_rms_epsilon":
            value = value / factor
        elif key == "general.name":
            value = f"{value} widened x{factor} ({precision})"
        add_field(writer, key, field, value)


def add_field(writer: Any, key: str, field: ReaderField, value: Any) -> None:
    """Write `key` with `value` in the type `field` (read from another GGUF) has."""
    from gguf import GGUFValueType

    vtype = GGUFValueType(field.types[0])
    sub_type = GGUFValueType(field.types[-1]) if vtype == GGUFValueType.ARRAY else None
    writer.add_key_value(key, value, vtype, sub_type=sub_type)


def _numpy_shape(tensor: ReaderTensor) -> tuple[int, ...]:
    return tuple(int(n) for n in reversed(tensor.shape.tolist()))  # rows, columns


def _wide_shape(tensor: ReaderTensor, factor: int) -> tuple[int, ...]:
    """Every axis of a layer's matrix grows (its rows and columns are heads, neurons or the
    residual stream); the embedding and output grow along the residual stream only."""
    shape, kind = _numpy_shape(tensor), role(tensor.name)
    if kind is Role.KEEP:
        return shape
    if kind is Role.NORM:
        return (shape[0] * factor,)
    if tensor.name in ("token_embd.weight", "output.weight"):
        return (shape[0], shape[1] * factor)
    return (shape[0] * factor, shape[1] * factor)


def _values(tensor: ReaderTensor) -> np.ndarray:
    """The tensor as float32 in numpy order, dequantized by the gguf package if it is quantized."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    if tensor.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        data = np.asarray(tensor.data, dtype=np.float32)
    else:
        data = dequantize(tensor.data, tensor.tensor_type)
    return data.reshape(_numpy_shape(tensor))


def _widen_tensor(tensor: ReaderTensor, factor: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """The widened tensor in `dtype`. The original is cast once, then copied (cheaper than casting
    the wide matrix: the build writes gigabytes)."""
    original = _values(tensor)
    kind = role(tensor.name)
    if kind is Role.NORM:
        return _rescaled_norm(original, shape, factor).astype(dtype, copy=False)
    small = original.astype(dtype, copy=False)
    if kind is Role.KEEP or shape == small.shape:
        return small
    if kind is Role.READ:
        return np.tile(small, tuple(w // n for w, n in zip(shape, small.shape, strict=True)))
    wide = np.zeros(shape, dtype=dtype)
    wide[tuple(slice(0, n) for n in small.shape)] = small
    return wide


def _rescaled_norm(original: np.ndarray, shape: tuple[int, ...], factor: int) -> np.ndarray:
    """RMSNorm over D = f·d divides the same sum of squares by f times more: its weights x sqrt(d/D)
    give the original's values back (with eps / f). The new dimensions' weights meet zeros."""
    return np.resize(original, shape) * np.float32(1 / math.sqrt(factor))

