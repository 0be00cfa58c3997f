"""Signals a command must answer without losing work or leaving a hung process behind.

* SIGINT (Ctrl+C), SIGTERM, SIGHUP: a headless command stops the work under way at the next cycle
  and says `interrupted` in one line, with exit code 128 + the signal (`spectui.faults`); it never
  prints figures from the run it cut. The chat app saves the reply in progress first
  (`spectui.ui.quitting`).
* SIGBUS: llama.cpp reads weights through a memory map of the model file; a file truncated in
  place while loaded (see `spectui.engine.model.loaded_file`) raises SIGBUS in the thread that reads a
  lost page. Left alone the process dies with "Bus error" (and a terminal in raw mode). Python's
  handler for it only sets a flag, so the faulting thread faults again and again and never
  returns; but the *main* thread runs the Python-level handler at its next bytecode, which names
  the file in one line and ends the process (`os._exit`: nothing can unwind the faulting thread).
  That needs every llama.cpp call off the main thread: the main thread only waits
  (`run_guarded`), or runs the app's event loop.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TypeVar

from spectui.errors import Interrupted
from spectui.faults import Fault

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WAIT_STEP = 0.2
"""Seconds between the main thread's checks while the work runs (it wakes at once on a signal)."""
STOP_GRACE = 30.0
"""Seconds a stopped run may take to reach the end of its cycle before the process ends anyway."""


def exit_now(line: str, code: int) -> None:
    """Say `line` on stderr and end the process at once (C stdio flushed). Written to the file
    descriptor itself: inside the app, Textual captures `sys.stderr`."""
    import ctypes

    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)
    with contextlib.suppress(OSError):
        os.write(2, f"spectui: {line}\n".encode())
    os._exit(code)


@contextlib.contextmanager
def on_bus_error(handler: Callable[[], Fault]) -> Iterator[Callable[[], None]]:
    """While inside: a SIGBUS calls `handler` once, on the main thread; it saves what it must and
    returns the fault, whose line ends the process. Yields the same action for a caller that
    learns of the SIGBUS another way (`run_guarded`'s wakeup fd)."""
    fired = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        if fired.is_set():
            return  # the faulting thread raises it again and again
        fired.set()
        fault = Fault("model-file", "a model file changed on disk while llama.cpp was reading it")
        try:
            fault = handler()
        finally:
            exit_now(fault.line, fault.exit_code)

    previous = signal.signal(signal.SIGBUS, on_signal)
    try:
        yield lambda: on_signal(signal.SIGBUS, None)
    finally:
        signal.signal(signal.SIGBUS, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise `Interrupted` on the main thread, as Ctrl+C raises
    KeyboardInterrupt."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def run_guarded(work: Callable[[threading.Event], T], on_fatal: Callable[[], Fault]) -> T:
    """Run `work(stop)` on a worker thread while the main thread watches for signals.

    Ctrl+C, SIGTERM or SIGHUP set `stop` (the work ends at its next check) and raise `Interrupted`
    once it has; a SIGBUS calls `on_fatal` and ends the process with the line of the fault it
    returns. Whatever `work` raises is raised here; otherwise its result is returned.
    """
    stop = threading.Event()
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, work(stop)))
        except BaseException as error:  # handed to the main thread, which raises it
            outcome.append((False, error))

    thread = threading.Thread(target=run, name="spectui-work", daemon=True)
    with on_bus_error(on_fatal) as bus_fault, stop_signals_raise(), _signal_bytes() as arrived:
        thread.start()
        try:
            while thread.is_alive():
                # Not only the Python-level handler: CPython may never run it for a signal that a
                # non-main thread takes again and again (seen ~1 run in 10: the main thread waited
                # for ever), but its C handler writes every signal's number to the wakeup fd.
                if signal.SIGBUS in arrived(WAIT_STEP):
                    bus_fault()
        except (KeyboardInterrupt, Interrupted) as stopped:
            signum = stopped.signum if isinstance(stopped, Interrupted) else signal.SIGINT
            stop.set()
            _wait_for(thread)
            raise Interrupted(signum) from None
    ok, value = outcome[0]
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]


@contextlib.contextmanager
def _signal_bytes() -> Iterator[Callable[[float], bytes]]:
    """While inside: the numbers of the signals that arrived, through CPython's wakeup fd; the
    callable waits up to its argument in seconds for some and returns them (b"" if none)."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def arrived(seconds: float) -> bytes:
        ready, _, _ = select.select([reader], [], [], seconds)
        if not ready:
            return b""
        with contextlib.suppress(BlockingIOError):
            return reader.recv(256)
        return b""

    try:
        yield arrived
    finally:
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()


def _wait_for(thread: threading.Thread) -> None:
    """Give a stopped run time to end its cycle; ignore further stop signals meanwhile."""
    import time

    deadline = time.monotonic() + STOP_GRACE
    while thread.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(KeyboardInterrupt, Interrupted):
            thread.join(WAIT_STEP)
