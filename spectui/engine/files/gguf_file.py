"""Cheap checks on a GGUF file before llama.cpp sees it, and a diagnosis when it refuses one."""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from spectui.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # what llama.cpp's gguf reader accepts (ggml/src/gguf.cpp:493-517)
LLAMA_CPP_PYTHON = "0.3.36"


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
        raise ModelLoadError(f"{path} is empty (0 bytes); {refetch_hint(path)}")
    if magic != GGUF_MAGIC:
        start = f"it is only {len(magic)} bytes long" if len(magic) < 4 else f"it starts with {magic!r}"
        raise ModelLoadError(
            f"{path} is not a GGUF file ({start}); spectui runs llama.cpp GGUF models"
        )


# GGUF metadata value types by id: struct formats of the scalars; 8 = string, 9 = array.
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4  # GGML_MAX_DIMS (ggml/include/ggml.h)
_READ_BUFFER = 1 << 20

MetaValue = int | float | bool | str


def as_int(value: object) -> int:
    """`int(value)` for a metadata number or numeric string; TypeError for anything else (a list,
    None), as `int()` itself raises: the one place an untyped metadata value becomes a number."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"a GGUF metadata number was expected, not {type(value).__name__}")


SMALL_ARRAY = 4096
"""Number arrays up to this long are kept (per-layer hyperparameters); longer ones (a token list's
scores, merges) are only read past."""


@dataclass(frozen=True)
class ArrayInfo:
    """A metadata array: its item type and length, and its values when it is a short array of
    numbers (per-layer head counts, recurrent-layer flags); None otherwise."""

    item_type: int
    count: int
    values: tuple[int | float | bool, ...] | None = None


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF header says, without the tensor data: metadata and tensor totals."""

    version: int
    metadata: dict[str, MetaValue | ArrayInfo]
    n_tensors: int
    n_elements: int
    """Sum of every tensor's element count (the parameters stored in this file)."""
    data_start: int
    data_end: int
    """Offset after the last tensor's data, relative to `data_start`."""
    tensor_names: frozenset[str] = frozenset()
    """The names of the tensors this file holds (which optional parts a draft head carries)."""

    @property
    def expected_size(self) -> int:
        return self.data_start + self.data_end


class _Header:
    """A forward-only reader over a GGUF header (little-endian, version 2 or 3)."""

    def __init__(self, f: BinaryIO, file_size: int) -> None:
        self.f = f
        self.file_size = file_size

    def u32(self) -> int:
        value: int = struct.unpack("<I", self._read(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self._read(8))[0]
        return value

    def string(self) -> bytes:
        return self._read(self.u64())

    def value(self, vtype: int) -> MetaValue | ArrayInfo:
        if vtype == _STRING:
            return self.string().decode("utf-8", errors="replace")
        if vtype == _ARRAY:
            item_type, count = self.u32(), self.u64()
            if item_type in _SCALAR_FORMATS:
                fmt = _SCALAR_FORMATS[item_type]
                data = self._read(struct.calcsize(fmt) * count)
                if count <= SMALL_ARRAY:
                    return ArrayInfo(item_type, count, struct.unpack(f"<{count}{fmt}", data))
            elif item_type == _STRING:
                self._skip_strings(count)
            else:
                for _ in range(count):
                    self.value(item_type)
            return ArrayInfo(item_type, count)
        fmt = _SCALAR_FORMATS[vtype]
        scalar: MetaValue = struct.unpack("<" + fmt, self._read(struct.calcsize(fmt)))[0]
        return scalar

    def _skip_strings(self, count: int) -> None:
        """Skip `count` length-prefixed strings (a token list) with few reads and no per-item I/O."""
        buf, pos = b"", 0
        for _ in range(count):
            if pos + 8 > len(buf):
                buf, pos = buf[pos:] + self.f.read(_READ_BUFFER), 0
            if pos + 8 > len(buf):
                raise EOFError("header ends early")
            (n,) = struct.unpack_from("<Q", buf, pos)
            pos += 8 + n
            while pos > len(buf):
                if n > self.file_size:
                    raise EOFError("header field longer than the file")
                more = self.f.read(max(_READ_BUFFER, pos - len(buf)))
                if not more:
                    raise EOFError("header ends early")
                buf += more
        self.f.seek(pos - len(buf), os.SEEK_CUR)  # give back what was read past the last string

    def _read(self, n: int) -> bytes:
        if n > self.file_size:  # a damaged length field: never allocate it
            raise EOFError("header field longer than the file")
        data = self.f.read(n)
        if len(data) != n:
            raise EOFError("header ends early")
        return data


def read_header(path: Path) -> GGUFHeader | None:
    """The header of a GGUF file (opened read-only); None if it is not a readable GGUF header.

    Arrays (the token list, merges) are skipped and only their lengths kept, so this reads the
    header's bytes once and nothing of the tensor data.
    """
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # the block sizes of every ggml tensor type

    try:
        with path.open("rb", buffering=_READ_BUFFER) as f:
            header = _Header(f, os.fstat(f.fileno()).st_size)
            if header._read(4) != GGUF_MAGIC:
                return None
            version = header.u32()
            n_tensors, n_kv = header.u64(), header.u64()
            metadata: dict[str, MetaValue | ArrayInfo] = {}
            for _ in range(n_kv):
                key = header.string().decode("utf-8", errors="replace")
                metadata[key] = header.value(header.u32())
            alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
            end = elements = 0
            names = set()
            for _ in range(n_tensors):
                names.add(header.string().decode("utf-8", errors="replace"))
                n_dims = header.u32()
                if n_dims > _MAX_DIMS:
                    return None
                dims = [header.u64() for _ in range(n_dims)]
                ggml_type, offset = header.u32(), header.u64()
                block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
                count = math.prod(dims)
                elements += count
                end = max(end, offset + count // block * type_size)
            align = alignment if isinstance(alignment, int) and alignment > 0 else _DEFAULT_ALIGNMENT
            data_start = -(-f.tell() // align) * align
    except (EOFError, KeyError, struct.error, OSError, ValueError):
        return None
    return GGUFHeader(version, metadata, n_tensors, elements, data_start, end, frozenset(names))


def expected_size(path: Path) -> int | None:
    """Bytes a complete copy of this GGUF has, from its header; None if the header is unreadable.

    A split GGUF's parts each list their own tensors, so this works per file.
    """
    header = read_header(path)
    return None if header is None else header.expected_size


def read_metadata(path: Path) -> dict[str, MetaValue | None]:
    """The header's key/value pairs: numbers, booleans and strings; arrays map to None.

    Reads only the header (no tensor data), so it is cheap even for a 20 GB model. Raises
    `ModelLoadError` when the file is not a GGUF or its header is damaged.
    """
    check_readable(path)
    header = read_header(path)
    if header is None:
        raise ModelLoadError(f"{path} cannot be used: {diagnose(path)}")
    return {key: None if isinstance(value, ArrayInfo) else value for key, value in header.metadata.items()}


def diagnose(path: Path) -> str:
    """Why a GGUF that passed `check_readable` may still fail to load: the reason and what to do."""
    actual = path.stat().st_size
    header = read_header(path)
    version = header.version if header is not None else _version(path)
    if version is not None and version not in GGUF_VERSIONS:
        return (f"it is GGUF version {version}, and llama.cpp reads versions "
                f"{' and '.join(map(str, GGUF_VERSIONS))}; get a GGUF made by a current converter")
    if header is None:
        return f"its header is damaged or truncated; {refetch_hint(path)}"
    if actual < header.expected_size:
        return f"it is truncated ({actual:,} of {header.expected_size:,} bytes); {refetch_hint(path)}"
    return ("its architecture or tensor types are not supported by the llama.cpp in "
            f"llama-cpp-python {LLAMA_CPP_PYTHON} (the version spectui is pinned to), or the file is "
            "damaged; try another GGUF of the model, or download it again")


RefetchHint = Callable[[Path], str]
"""How to replace a damaged copy of a file: "download it again", or by the tool that fetched it."""


def _download_again(path: Path) -> str:
    return "download it again"


_refetch_hint: RefetchHint = _download_again


def use_refetch_hint(hint: RefetchHint) -> None:
    """Name the tool that fetched a damaged file in the messages above (`ollama pull NAME` for an
    Ollama blob, `spectui pull PAIR` for a pulled pair's file). The stores are the catalog's
    knowledge, above the engine: the command line hands its `catalog.local.origin.refetch_hint`
    in at start; it is asked only when a file is already known to be damaged."""
    global _refetch_hint
    _refetch_hint = hint


def refetch_hint(path: Path) -> str:
    """How to replace a damaged copy of `path` (see `use_refetch_hint`)."""
    return _refetch_hint(path)


def _version(path: Path) -> int | None:
    """The GGUF version field, read on its own (when the rest of the header is unreadable)."""
    try:
        with path.open("rb") as f:
            data = f.read(8)
    except OSError:
        return None
    return struct.unpack("<I", data[4:8])[0] if len(data) == 8 and data[:4] == GGUF_MAGIC else None
