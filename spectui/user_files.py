"""Files spectui writes into the user's folders and its own store: whole or not at all.

Every write goes to a temporary file beside its target (the same folder, so the same file
system), is flushed and fsynced, and only then takes the target's name; the folder is fsynced
after the rename. A full disk or a crash midway leaves the old file as it was (or no new file),
never a part of one. The temporary file is removed when the write fails.

- `create_new` makes a file only if nothing has that name: the finished temporary file is
  hard-linked to the name, which fails if anything (a file, a link, even a dangling one) appeared
  there meanwhile, so nothing is ever overwritten. A file system without hard links gets
  `O_CREAT | O_EXCL` on the name itself, the unfinished file removed if the write fails.
- `replace_file` writes over an existing file on purpose (`export -o FILE --force`, spectui's own
  records): `os.replace`, atomic; the old file's permission bits are kept, and a link is
  followed (the file it points at is replaced, the link stays).
- `write_unused_name` picks the first free name of a series (`spectui-chat-7.md`,
  `spectui-chat-7-2.md`, ...), for the app's export key, which has no one to ask.

And one read: `read_user_text`, a file the user writes (config.toml, a catalog), whose failure is
one line naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Literal, overload

from spectui.errors import SpectuiError

MAX_SERIES = 1000
"""Names tried by `write_unused_name` before it gives up (a folder full of earlier exports)."""
NEW_FILE_MODE = 0o666
"""What a new file asks for (the umask takes its share, as for any program's new file)."""
NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK})


def temporary_beside(path: Path, mode: int = NEW_FILE_MODE) -> tuple[int, Path]:
    """A new, empty, hidden file in `path`'s folder (`.NAME.1f2e3d4c.tmp`), open for writing."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def write_temporary(path: Path, data: bytes, mode: int = NEW_FILE_MODE) -> Path:
    """`data` written whole and fsynced to a temporary file beside `path`; its path. Nothing is
    left behind when the write fails (a full disk)."""
    fd, tmp = temporary_beside(path, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except BaseException as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(error, OSError) and error.filename is None:  # a write names no file: name the target
            raise OSError(error.errno, error.strerror or str(error), str(path)) from error
        raise
    return tmp


def sync_folder(folder: Path) -> None:
    """fsync a folder, so that a rename in it survives a crash (not every system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replace_file(path: Path, text: str | bytes) -> Path:
    """Write `text` to `path`, replacing what is there only once the new content is whole on disk.
    A link is followed: the file it points at is replaced. Returns the path written."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    path = path.resolve() if path.is_symlink() else path
    try:
        old_mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        old_mode = None
    tmp = write_temporary(path, data)
    try:
        if old_mode is not None:
            os.chmod(tmp, old_mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    sync_folder(path.parent)
    return path


def create_new(path: Path, text: str) -> Path:
    """Write `text` to `path`, which must not exist yet; `FileExistsError` if it does."""
    if os.path.lexists(path):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
    tmp = write_temporary(path, text.encode("utf-8"))
    try:
        os.link(tmp, path, follow_symlinks=False)
    except OSError as error:
        if error.errno not in NO_HARD_LINKS:
            raise
        _create_in_place(path, text)  # a file system without hard links
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    sync_folder(path.parent)
    return path


def _create_in_place(path: Path, text: str) -> None:
    """`O_CREAT | O_EXCL` on the name itself; the unfinished file is removed if the write fails."""
    file = open(path, "x", encoding="utf-8")  # noqa: SIM115 - closed below, and removed if unfinished
    try:
        with file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


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


@overload
def read_user_text(path: Path, error: type[SpectuiError]) -> str: ...
@overload
def read_user_text(path: Path, error: type[SpectuiError], *, missing_ok: Literal[True]) -> str | None: ...
def read_user_text(path: Path, error: type[SpectuiError], *, missing_ok: bool = False) -> str | None:
    """The text of a file the user writes; None when it is absent and `missing_ok`. Any other
    failure is `error` with one line: it cannot be read (why), or it is not UTF-8 (where)."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as failure:
        if missing_ok and isinstance(failure, FileNotFoundError):
            return None
        raise error(f"{path}: cannot be read ({failure.strerror}); fix or remove it") from None
    except UnicodeDecodeError as bad:
        raise error(
            f"{path}: not UTF-8 text (byte 0x{bad.object[bad.start]:02x} at offset {bad.start}); "
            "save it as UTF-8 (TOML files must be), or remove it"
        ) from None
