"""Faults, named in one place: an error or a reply's end -> one line, a kind, an exit code.

Every surface asks here how to say what went wrong: the command line (`spectui.cli` prints the
line and exits with the code), `spectui bench --json` (the error object), the chat app (a note and
a notification; `reload` says its next message loads the pair again) and any other front end
over the engine. A fault is never reported as a result: a run it cut gives no figures.

The engine says *what* happened (`WorkerLostError.what`, `ModelFileError.what`, or a `Finished`
whose reason is a fault); what to do depends on the surface, and is added here:

| kind | raised as | exit |
|---|---|---|
| `worker-lost` | an RPC worker stopped answering mid-run (`WorkerLostError`) | 1 |
| `worker-unreachable` | a worker refused, is unknown, speaks another protocol (`RpcError`) | 1 |
| `model-file` | a model file missing, damaged, or changed on disk while loaded | 1 |
| `context-full` | the context filled up (`ContextFullError`) | 1 |
| `store-damaged` | the chat store is damaged (`StoreDamaged`) | 1 |
| `cannot-measure` | bench refused what it cannot measure (`CannotMeasure`) | 2 |
| `interrupted` | Ctrl+C, SIGTERM, SIGHUP | 128 + signal |
| `error` | any other one-line `SpectuiError` (catalog, pull, settings, disk) | 1 |

Exit 2 is also argparse's, for an option it refuses: both mean "not like this".
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal, Protocol

from spectui.errors import (
    CannotMeasure,
    ContextFullError,
    Interrupted,
    ModelFileError,
    ModelLoadError,
    RpcError,
    SpectuiError,
    WorkerLostError,
)


class Ended(Protocol):
    """How a reply ended, as the engine's `Finished` and the reply core's `ReplyDone` both say it
    (declared here: faults sit below the session and know no reply core)."""

    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def error(self) -> SpectuiError | None: ...
    @property
    def fault(self) -> bool: ...

Surface = Literal["command", "app", "server"]
FaultKind = Literal["worker-lost", "worker-unreachable", "model-file", "context-full", "store-damaged",
                    "cannot-measure", "interrupted", "error"]

EXIT_FAULT = 1
EXIT_REFUSED = 2
EXIT_SIGNAL_BASE = 128

AGAIN = {
    "command": ", then run the command again",
    "app": "; your next message loads the pair again",
    "server": ", then restart the server",
}
"""How a surface gets its models back once the cause is gone."""


class StoreDamaged(SpectuiError):
    """The chat store cannot be read as a whole (not a database, a failed check, truncated)."""


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    line: str
    """What happened and what to do, in one line (no trailing period)."""
    exit_code: int = EXIT_FAULT
    reload: bool = False
    """The loaded models are unusable until loaded again (a worker lost, a file changed)."""

    def as_json(self) -> dict[str, object]:
        """What `--json` prints instead of results: never a figure."""
        return {"error": self.line, "fault": self.kind, "exit_code": self.exit_code}


def of_error(error: BaseException, surface: Surface = "command") -> Fault:
    """The fault an exception stands for (a `SpectuiError`; anything else is a bug and is not
    classified here: the caller logs it)."""
    if isinstance(error, WorkerLostError):
        return Fault("worker-lost", f"{error.what}: start the worker again{AGAIN[surface]}", reload=True)
    if isinstance(error, ModelFileError):
        fix = "put the file back (or pull the pair again)"
        return Fault("model-file", f"{error.what}: {fix}{AGAIN[surface]}", reload=True)
    if isinstance(error, CannotMeasure):
        return Fault("cannot-measure", str(error), EXIT_REFUSED)
    if isinstance(error, ContextFullError):
        return Fault("context-full", str(error))
    if isinstance(error, StoreDamaged):
        return Fault("store-damaged", str(error))
    if isinstance(error, RpcError):
        again = AGAIN["app"] if surface == "app" else ""
        return Fault("worker-unreachable", f"{error}{again}", reload=surface == "app")
    if isinstance(error, ModelLoadError):
        again = AGAIN["app"] if surface == "app" else ""
        return Fault("model-file", f"{error}{again}", reload=surface == "app")
    if isinstance(error, KeyboardInterrupt):
        return interrupted(signal.SIGINT)
    if isinstance(error, Interrupted):
        return interrupted(error.signum)
    return Fault("error", str(error))


def of_finished(finished: Ended, surface: Surface = "command") -> Fault | None:
    """The fault that cut a reply short, or None for a reply that ended as replies end (the
    model's end, a stop string, the token limit, the user's stop). The engine's `Finished` or
    the reply core's `ReplyDone`: both say their reason, message and error."""
    if not finished.fault:
        return None
    if finished.error is not None:
        return of_error(finished.error, surface)
    kinds: dict[str, FaultKind] = {"worker": "worker-lost", "file": "model-file"}
    kind = kinds.get(finished.reason, "context-full")
    return Fault(kind, finished.message or f"the reply was cut ({finished.reason})", reload=kind != "context-full")


def raise_for(finished: Ended) -> None:
    """Raise the error that cut this reply, if a fault did (for callers that cannot use a cut
    reply: a benchmark run, the calibration after a load)."""
    if finished.fault:
        raise finished.error or SpectuiError(finished.message or f"the reply was cut ({finished.reason})")


def interrupted(signum: int) -> Fault:
    names: dict[int, str] = {signal.SIGINT: "Ctrl+C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
    name = names.get(signum, f"signal {signum}")
    return Fault("interrupted", f"interrupted ({name})", EXIT_SIGNAL_BASE + signum)


def bus_fault(surface: Surface = "command") -> Fault:
    """A SIGBUS while models were loaded: a file llama.cpp maps was cut under it (the one that
    changed is named, when it can be found)."""
    from spectui.engine.model.loaded_file import first_change

    what = first_change() or "a model file changed on disk while llama.cpp was reading it"
    return of_error(ModelFileError(what), surface)
