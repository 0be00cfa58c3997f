"""The last resort: an unexpected error becomes one line for the user and a log file with the rest.

`report(error)` writes the full traceback (with the version, the command line and the platform) to
`paths.log_dir()/error-YYYYMMDD-HHMMSS-PID.log` and returns the line to show, which names that
file. If the log directory cannot be written either, the log goes to the system's temporary
directory; only if that fails too does the line say that no log could be written.
"""

from __future__ import annotations

import errno
import os
import platform
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path

from spectui import __version__

USER_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                         errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP})
"""OSErrors that come from the user's files or disks rather than from a bug in spectui."""


def write_log(error: BaseException, context: str = "") -> Path | None:
    """Write the traceback of `error` to a new log file; its path, or None if none could be made."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"error-{stamp}-{os.getpid()}.log"
    body = "".join([
        f"spectui {__version__} · Python {platform.python_version()} · {platform.platform()}\n",
        f"time: {datetime.now().isoformat(timespec='seconds')}\n",
        f"command: {' '.join(sys.argv)}\n",
        f"while: {context}\n" if context else "",
        "\n",
        *traceback.format_exception(type(error), error, error.__traceback__),
    ])
    for directory in (_log_dir(), Path(tempfile.gettempdir()) / "spectui-logs"):
        if directory is None:
            continue
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / name
            path.write_text(body, encoding="utf-8")
            return path
        except OSError:
            continue
    return None


def _log_dir() -> Path | None:
    from spectui import paths
    from spectui.errors import SpectuiError

    try:
        return paths.log_dir()
    except SpectuiError:  # SPECTUI_HOME itself is unusable: the temporary directory will do
        return None


def summary(error: BaseException) -> str:
    """`TypeName: first line of the message`, at most 200 characters."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    described = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return described if len(described) <= 200 else described[:199] + "…"


def report(error: BaseException, context: str = "") -> str:
    """Log `error` and return the one line for the user (without the `spectui: ` prefix)."""
    log = write_log(error, context)
    where = f"the details are in {log}" if log else "no log could be written"
    doing = f" while {context}" if context else ""
    return f"unexpected error{doing} ({summary(error)}); {where}; please report it"


def describe_os_error(error: OSError) -> str | None:
    """One line for an OSError that is about the user's files or disks, else None (a bug)."""
    if error.errno not in USER_ERRNOS:
        return None
    where = error.filename or "a file"
    reason = error.strerror or str(error)
    if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.ENOSPC, errno.EDQUOT,
                       errno.EFBIG):  # EFBIG: a file system's (FAT's 4 GB) or the process's size limit
        return (f"cannot use {where} ({reason}); make it writable, or point spectui at another "
                "directory: SPECTUI_HOME=/some/dir spectui ...")
    return f"cannot use {where} ({reason}); check the path"


def quiet_broken_pipe() -> None:
    """After a BrokenPipeError on stdout (`spectui list | head -1`) or a full one (`> /dev/full`):
    point stdout at /dev/null so the interpreter's final flush does not print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
