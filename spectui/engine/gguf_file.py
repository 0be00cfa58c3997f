"""Cheap checks on a GGUF file before llama.cpp sees it, and a diagnosis when it refuses one."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import BinaryIO

from spectui.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"


def check_readable(path: Path) -> None:
    """Raise `ModelLoadError` unless `path` is an existing file that starts like a GGUF."""
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}; check the path or run `spectui pull`")
    if not path.is_file():
        raise ModelLoadError(f"{path} is not a file; pass the path of a .gguf model file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"{path} is not a GGUF file (it starts with {magic!r}); spectui runs llama.cpp GGUF models"
        )


# GGUF metadata value types: struct formats by type id (u8 i8 u16 i16 u32 i32 f32 bool, then
# u64 i64 f64); 8 = string, 9 = array.
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                   10: "<Q", 11: "<q", 12: "<d"}
_SCALAR_SIZES = {vtype: struct.calcsize(fmt) for vtype, fmt in _SCALAR_FORMATS.items()}
_STRING, _ARRAY = 8, 9
MetadataValue = int | float | bool | str | None
_DEFAULT_ALIGNMENT = 32


class _Header:
    """A forward-only reader over a GGUF header (little-endian, version 2 or 3)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f

    def u32(self) -> int:
        return struct.unpack("<I", self._read(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self._read(8))[0]

    def string(self) -> bytes:
        return self._read(self.u64())

    def value(self, vtype: int) -> object:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.u32(), self.u64()
            if item_type in _SCALAR_SIZES:
                self._read(_SCALAR_SIZES[item_type] * count)
            else:
                for _ in range(count):
                    self.value(item_type)
            return None
        return struct.unpack(_SCALAR_FORMATS[vtype], self._read(_SCALAR_SIZES[vtype]))[0]

    def _read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise EOFError("header ends early")
        return data


def expected_size(path: Path) -> int | None:
    """Bytes a complete copy of this GGUF has, from its header; None if the header is unreadable.

    A split GGUF's parts each list their own tensors, so this works per file.
    """
    from gguf.constants import GGML_QUANT_SIZES  # the block sizes of every ggml tensor type

    try:
        with path.open("rb") as f:
            header = _Header(f)
            if header._read(4) != GGUF_MAGIC:
                return None
            header.u32()  # version
            n_tensors, n_kv = header.u64(), header.u64()
            alignment = _DEFAULT_ALIGNMENT
            for _ in range(n_kv):
                key, vtype = header.string(), header.u32()
                value = header.value(vtype)
                if key == b"general.alignment" and isinstance(value, int):
                    alignment = value
            end = 0
            for _ in range(n_tensors):
                header.string()
                dims = [header.u64() for _ in range(header.u32())]
                ggml_type, offset = header.u32(), header.u64()
                block, type_size = GGML_QUANT_SIZES[ggml_type]
                end = max(end, offset + math.prod(dims) // block * type_size)
            data_start = -(-f.tell() // alignment) * alignment
    except (EOFError, KeyError, struct.error, OSError):
        return None
    return data_start + end


def read_metadata(path: Path) -> dict[str, MetadataValue]:
    """The header's key/value pairs: numbers, booleans and strings; arrays map to None.

    Reads only the header (no tensor data), so it is cheap even for a 20 GB model. Raises
    `ModelLoadError` when the file is not a GGUF or its header is damaged.
    """
    check_readable(path)
    values: dict[str, MetadataValue] = {}
    try:
        with path.open("rb") as f:
            header = _Header(f)
            header._read(4)  # magic, checked above
            header.u32()  # version
            header.u64()  # tensor count
            for _ in range(header.u64()):
                key, vtype = header.string(), header.u32()
                value = header.value(vtype)
                if isinstance(value, bytes):
                    value = value.decode("utf-8", errors="replace")
                values[key.decode("utf-8", errors="replace")] = value
    except (EOFError, KeyError, struct.error, OSError):
        raise ModelLoadError(f"{path.name}: its GGUF header is damaged or truncated") from None
    return values


def diagnose(path: Path) -> str:
    """Why a GGUF that passed `check_readable` may still fail to load, in a phrase."""
    actual = path.stat().st_size
    expected = expected_size(path)
    if expected is None:
        return "its header is damaged or truncated"
    if actual < expected:
        return f"it is truncated ({actual:,} of {expected:,} bytes)"
    return "its architecture or tensor types are not supported by the installed llama.cpp"
