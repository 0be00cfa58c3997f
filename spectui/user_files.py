"""Files spectui writes into the user's own folders are new files: an existing one is never
overwritten unless the user said so.

`create_new` creates a file only if nothing has that name (`O_CREAT | O_EXCL`, so a file or link
that appears between a check and the write is not overwritten either; a link, even a dangling
one, counts as existing). `write_unused_name` picks the first free name of a series
(`spectui-chat-7.md`, `spectui-chat-7-2.md`, ...), for the app's export key, which has no one to
ask. A file that could not be written whole is removed, so no half file is left behind.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

MAX_SERIES = 1000
"""Names tried by `write_unused_name` before it gives up (a folder full of earlier exports)."""


def create_new(path: Path, text: str) -> Path:
    """Write `text` to `path`, which must not exist yet; `FileExistsError` if it does."""
    file = open(path, "x", encoding="utf-8")  # noqa: SIM115 - closed below, and removed if unfinished
    try:
        with file:
            file.write(text)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    return path


def series(directory: Path, stem: str, suffix: str) -> list[Path]:
    """`stem.suffix`, then `stem-2.suffix`, `stem-3.suffix`, ... in `directory`."""
    return [directory / f"{stem}{'' if n == 1 else f'-{n}'}{suffix}" for n in range(1, MAX_SERIES + 1)]


def write_unused_name(directory: Path, stem: str, suffix: str, text: str) -> Path:
    """Write `text` to the first name of `series` that is free; `FileExistsError` (naming the
    first) when all of them are taken."""
    names = series(directory, stem, suffix)
    for path in names:
        try:
            return create_new(path, text)
        except FileExistsError:
            continue
    raise FileExistsError(17, f"{MAX_SERIES} files named like it already exist", str(names[0]))
