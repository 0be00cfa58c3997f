"""The standard output of a command, told apart from the files spectui writes.

A write to the standard output that fails (`spectui doctor > /dev/full`, a full disk under a
redirection, a device that fails) raises `OutputError`, so that the command's one line blames the
output, not a file or spectui's own directory; a closed pipe stays a `BrokenPipeError` (`spectui
list | head -1` ends quietly). A command started with its standard output closed (`>&-`) is
refused before it runs: what it prints would go nowhere, and a file opened later (the chat store,
a log) would take the closed descriptor's number and receive what llama.cpp prints there.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO, Any, TextIO, cast


class OutputError(OSError):
    """Writing to the standard output failed; `strerror` says why."""

    def line(self) -> str:
        reason = self.strerror or str(self)
        return (f"cannot write to the standard output ({reason}): what spectui printed is incomplete; "
                "send it somewhere with room (another file, a pipe)")


CLOSED_LINE = ("the standard output is closed, so nothing spectui says could be shown: send it to a file, "
               "a pipe or /dev/null instead (e.g. > /dev/null)")


def standard_output_open() -> bool:
    """False when the process started with its standard output closed. Any closed standard
    descriptor (0, 1, 2) is given /dev/null first, so that no file opened later takes it."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
            with contextlib.suppress(OSError):
                null = os.open(os.devnull, os.O_RDWR)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
    return 1 not in closed and sys.stdout is not None


class _Guarded:
    """`sys.stdout` as it was, with its failed writes raised as `OutputError`."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _as_output_error():
            return self._stream.write(text)

    def writelines(self, lines: Any) -> None:
        with _as_output_error():
            self._stream.writelines(lines)

    def flush(self) -> None:
        with _as_output_error():
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _as_output_error() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as error:
        if isinstance(error, OutputError):
            raise
        raise OutputError(error.errno, error.strerror or str(error)) from error


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Within it, a failed write to the standard output raises `OutputError` (the real
    standard output only: a test's captured one is left as it is)."""
    stream = sys.stdout
    if stream is None or stream is not sys.__stdout__:
        yield
        return
    sys.stdout = cast(TextIO, _Guarded(cast(IO[str], stream)))
    try:
        yield
    finally:
        sys.stdout = stream
