"""A damaged chat store replaced by a repaired one, never leaving fewer readable chats than it found.

The repaired store is built beside the damaged one under a temporary name
(`.chats.sqlite3.1f2e3d4c.tmp`): every readable chat is salvaged into it (`spectui.chat.salvage`),
its WAL written into the file and switched off (one file, whole), the file fsynced, then read
back: it must hold every chat and message that was salvaged. Only then does the damaged store
move aside: a hard link `chats.sqlite3.damaged-...` first (so the store's own name never points at
nothing), its -wal/-shm/-journal next (a WAL left beside the new file would be replayed into it),
then the new file takes the name in one rename, and the folder is fsynced.

A failure before that point (a full disk, a folder that cannot be written) removes the temporary
store and leaves the damaged one exactly as it was, still readable by `spectui export`:
`RepairFailed` says why, in SQLite's or the system's words.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from spectui.chat.salvage import SIDE_FILES, Salvaged, aside_path, damage, open_readonly, salvage
from spectui.chat.store import ChatStore
from spectui.user_files import NO_HARD_LINKS, sync_folder, temporary_beside


class RepairFailed(Exception):
    """The repaired store could not be made whole; the damaged one was left in place."""


@dataclass(frozen=True)
class Repaired:
    aside: Path
    """Where the damaged store went (with its -wal/-shm beside it)."""
    found: Salvaged
    """What was read from it, all of it now in the new store."""


def repair(path: Path) -> Repaired:
    """Replace the damaged store at `path` with a fresh one holding everything readable in it."""
    tmp = _new_name(path)
    try:
        found = _build(path, tmp)
        _check(tmp, found)
        aside = _swap(path, tmp)
    except (sqlite3.Error, OSError) as error:
        _remove(tmp)
        raise RepairFailed(_reason(error)) from error
    except BaseException:
        _remove(tmp)
        raise
    return Repaired(aside, found)


def _new_name(path: Path) -> Path:
    """A free name beside `path` for the store being built (created empty, as SQLite accepts)."""
    try:
        fd, tmp = temporary_beside(path)
    except OSError as error:
        raise RepairFailed(_reason(error)) from error
    os.close(fd)
    return tmp


def _build(source: Path, tmp: Path) -> Salvaged:
    store = ChatStore(tmp)
    try:
        found = salvage(source, store)
        store.settle()
    finally:
        store.close()
    with open(tmp, "rb") as file:
        os.fsync(file.fileno())
    return found


def _check(tmp: Path, found: Salvaged) -> None:
    """The store on disk is sound and holds every chat and message salvaged."""
    if (problem := damage(tmp)) is not None:
        raise sqlite3.DatabaseError(f"the repaired copy fails its check ({problem})")
    db = open_readonly(tmp)
    try:
        messages, chats = db.execute("SELECT count(*), count(DISTINCT chat_id) FROM messages").fetchone()
    finally:
        db.close()
    if (chats, messages) != (found.chats, found.messages):
        raise sqlite3.DatabaseError(f"the repaired copy holds {chats} chats ({messages} messages), not the "
                                    f"{found.chats} ({found.messages}) read")


def _swap(path: Path, tmp: Path) -> Path:
    """Move the damaged store aside and put `tmp` in its place; undone if a step fails."""
    aside = aside_path(path)
    linked = _link(path, aside)
    moved: list[str] = []
    try:
        for suffix in SIDE_FILES[1:]:
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.replace(side, aside.with_name(aside.name + suffix))
                moved.append(suffix)
        if not linked:
            os.replace(path, aside)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            for suffix in moved:
                os.replace(aside.with_name(aside.name + suffix), path.with_name(path.name + suffix))
            if linked:
                aside.unlink()
            elif not path.exists():
                os.replace(aside, path)
        raise
    sync_folder(path.parent)
    return aside


def _link(path: Path, aside: Path) -> bool:
    """A second name for the damaged file (False on a file system without hard links)."""
    try:
        os.link(path, aside)
    except OSError as error:
        if error.errno in NO_HARD_LINKS:
            return False
        raise
    return True


def _remove(tmp: Path) -> None:
    for suffix in SIDE_FILES:
        with contextlib.suppress(OSError):
            tmp.with_name(tmp.name + suffix).unlink()


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return str(error)
