"""Cheap checks on a GGUF file before llama.cpp sees it, and a diagnosis when it refuses one."""

from __future__ import annotations

from pathlib import Path

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


def expected_size(path: Path) -> int | None:
    """Bytes a complete copy of this GGUF has, from its header; None if the header is unreadable.

    A split GGUF's first part lists only its own tensors, so this works per file.
    """
    from gguf import GGUFReader  # deferred: parsing a large header costs a moment

    try:
        reader = GGUFReader(path)
    except Exception:  # a truncated header fails in many ways inside the parser
        return None
    if not reader.tensors:
        return path.stat().st_size
    return max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)


def diagnose(path: Path) -> str:
    """Why a GGUF that passed `check_readable` may still fail to load, in a phrase."""
    actual = path.stat().st_size
    try:
        expected = expected_size(path)
    except Exception:
        expected = None
    if expected is None:
        return "its header is damaged or truncated"
    if actual < expected:
        return f"it is truncated ({actual:,} of {expected:,} bytes)"
    return "its architecture or tensor types are not supported by the installed llama.cpp"
