"""What a loaded model's file was when it was loaded, to tell when it changes under us.

llama.cpp reads a model's weights through a shared, read-only memory map of its file
(src/llama-mmap.cpp:472-482, `MAP_SHARED`). Removing the file, or renaming another over it, does
not touch the mapping: the old inode lives on until it is unmapped. Writing into it does: a file
truncated in place (`cp other.gguf model.gguf`, `truncate`, a download tool that reopens it with
O_TRUNC) loses the pages past its new end, and the next read of one raises SIGBUS in whichever
thread touches it; a file rewritten in place hands the next decode other weights.

A `LoadedFile` holds a descriptor on the file as it was loaded (so it follows the inode llama.cpp
mapped, not the path) and compares its size and modification time on demand: `changed()` costs
one fstat, cheap enough to run before every speculative cycle. `watched()` lists the files of every
model loaded now, for the last-resort SIGBUS handler (`spectui.signals`) to name the one that broke.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

_open: weakref.WeakSet[LoadedFile] = weakref.WeakSet()


class LoadedFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        stat = os.fstat(self._fd)
        self.size = stat.st_size
        self.mtime_ns = stat.st_mtime_ns
        self.identity = (stat.st_dev, stat.st_ino)
        _open.add(self)

    def changed(self) -> str | None:
        """What happened to the bytes llama.cpp reads (truncated, rewritten), in a few words
        naming the file; None while they are as loaded."""
        if self._fd is None:
            return None
        try:
            stat = os.fstat(self._fd)
        except OSError:
            return None
        if stat.st_size < self.size:
            return f"{self.path.name} was truncated on disk after it was loaded ({self.size} -> {stat.st_size} bytes)"
        if stat.st_size != self.size or stat.st_mtime_ns != self.mtime_ns:
            return f"{self.path.name} was rewritten on disk after it was loaded"
        return None

    def removed(self) -> bool:
        """The path no longer names the loaded file (removed, or another file put in its place);
        the loaded copy is intact, but loading the pair again will not find it."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return True
        return (stat.st_dev, stat.st_ino) != self.identity

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        _open.discard(self)


def watched() -> list[LoadedFile]:
    """The files of the models loaded now."""
    return list(_open)


def first_change() -> str | None:
    """What happened to the first loaded file that changed, or None."""
    return next((what for file in watched() if (what := file.changed()) is not None), None)
