"""Cheap checks on a GGUF file before llama.cpp sees it, and a diagnosis when it refuses one."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import BinaryIO

from spectui.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # what llama.cpp's gguf reader accepts (ggml/src/gguf.cpp:493-517)


def check_readable(path: Path) -> None:
    """Raise `ModelLoadError` unless `path` is an existing file that starts like a GGUF."""
    try:
        exists, is_file = path.exists(), path.is_file()
    except OSError as error:  # a name too long, a loop of links
        raise ModelLoadError(f"{path} cannot be used as a model file ({error.strerror or error})") from None
    if not exists:
        raise ModelLoadError(f"model file not found: {path}; check the path or run `spectui pull`")
    if not is_file:
        raise ModelLoadError(f"{path} is not a file; pass the path of a .gguf model file")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as error:
        raise ModelLoadError(f"{path} cannot be read ({error.strerror or error}); check its permissions") from None
    if not magic:
        raise ModelLoadError(f"{path} is empty (0 bytes); download it again (`spectui pull`)")
    if magic != GGUF_MAGIC:
        start = f"it is only {len(magic)} bytes long" if len(magic) < 4 else f"it starts with {magic!r}"
        raise ModelLoadError(
            f"{path} is not a GGUF file ({start}); spectui runs llama.cpp GGUF models"
        )


# GGUF metadata value types: fixed sizes by type id; 8 = string, 9 = array.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32


_MAX_DIMS = 4  # GGML_MAX_DIMS (ggml/include/ggml.h)


class _Header:
    """A forward-only reader over a GGUF header (little-endian, version 2 or 3).

    Counts and lengths come from the file and may be garbage (2**63 strings): every read is
    checked against the bytes left first, so a damaged header ends in EOFError, never in a huge
    allocation or a loop over billions of entries."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f = f
        self.size = size

    def left(self) -> int:
        return self.size - self.f.tell()

    def count(self, item_size: int) -> int:
        """A u64 count of items of at least `item_size` bytes that must fit in what is left."""
        n = self.u64()
        if n * item_size > self.left():
            raise EOFError("a count in the header is larger than the file")
        return n

    def u32(self) -> int:
        return struct.unpack("<I", self._read(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self._read(8))[0]

    def string(self) -> bytes:
        return self._read(self.count(1))

    def value(self, vtype: int) -> object:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type = self.u32()
            if item_type in _SCALAR_SIZES:
                self.f.seek(_SCALAR_SIZES[item_type] * self.count(_SCALAR_SIZES[item_type]), 1)
            elif item_type == _STRING:
                for _ in range(self.count(8)):
                    self.value(item_type)
            else:
                raise EOFError(f"array of type {item_type} in the header")
            return None
        if vtype not in _SCALAR_SIZES:
            raise EOFError(f"unknown value type {vtype} in the header")
        raw = self._read(_SCALAR_SIZES[vtype])
        return int.from_bytes(raw, "little")

    def _read(self, n: int) -> bytes:
        if n > self.left():
            raise EOFError("header ends early")
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
            header = _Header(f, path.stat().st_size)
            if header._read(4) != GGUF_MAGIC or header.u32() not in GGUF_VERSIONS:
                return None
            n_tensors, n_kv = header.count(8 + 4 + 8 + 8), header.count(8 + 4)
            alignment = _DEFAULT_ALIGNMENT
            for _ in range(n_kv):
                key, vtype = header.string(), header.u32()
                value = header.value(vtype)
                if key == b"general.alignment" and isinstance(value, int) and value > 0:
                    alignment = value
            end = 0
            for _ in range(n_tensors):
                header.string()
                n_dims = header.u32()
                if n_dims > _MAX_DIMS:
                    return None
                dims = [header.u64() for _ in range(n_dims)]
                ggml_type, offset = header.u32(), header.u64()
                block, type_size = GGML_QUANT_SIZES[ggml_type]
                end = max(end, offset + math.prod(dims) // block * type_size)
            data_start = -(-f.tell() // alignment) * alignment
    except (EOFError, KeyError, struct.error, OSError, ValueError, OverflowError):
        return None
    return data_start + end


LLAMA_CPP_PYTHON = "0.3.36"
"""The pinned llama-cpp-python whose vendored llama.cpp spectui runs."""


def _version(path: Path) -> int | None:
    try:
        with path.open("rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return struct.unpack("<I", head[4:])[0] if len(head) == 8 else None


def diagnose(path: Path) -> str:
    """Why a GGUF that passed `check_readable` may still fail to load: the reason and what to do."""
    actual = path.stat().st_size
    version = _version(path)
    if version is not None and version not in GGUF_VERSIONS:
        return (f"it is GGUF version {version}, and llama.cpp reads versions "
                f"{' and '.join(map(str, GGUF_VERSIONS))}; get a GGUF made by a current converter")
    expected = expected_size(path)
    if expected is None:
        return "its header is damaged or truncated; download it again (`spectui pull`)"
    if actual < expected:
        return f"it is truncated ({actual:,} of {expected:,} bytes); download it again (`spectui pull`)"
    return ("its architecture or tensor types are not supported by the llama.cpp in "
            f"llama-cpp-python {LLAMA_CPP_PYTHON} (the version spectui is pinned to), or the file is "
            "damaged; try another GGUF of the model, or download it again")
