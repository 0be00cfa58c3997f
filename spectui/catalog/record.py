"""The record of pulled pairs (`paths.pulled_record_path()`, JSON).

Writes are read-modify-write under a file lock and land atomically (temp file + `os.replace`),
so two pulls finishing at once both end up recorded and a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from spectui import paths
from spectui.errors import CatalogError


class PulledFile(BaseModel):
    """One file of a pulled model."""

    model_config = ConfigDict(extra="forbid")

    path: str
    """Absolute path (for Hub files, the snapshot path inside the Hub cache)."""

    size: int
    """Size in bytes when it was verified."""

    repo: str | None = None
    """Hub repo it came from; None for a local file the user pointed at."""

    filename: str | None = None
    """File name inside the repo."""

    commit: str | None = None
    """Commit the file was downloaded at."""

    owned: bool = False
    """True when spectui downloaded or built it, so `spectui rm` may delete it."""


class PulledPair(BaseModel):
    """A pair whose files are on disk and passed the size and compatibility checks."""

    model_config = ConfigDict(extra="forbid")

    target: list[PulledFile]
    """Target file(s); the first is the one llama.cpp opens."""

    draft: list[PulledFile] = []
    """Draft file(s); the first is the one llama.cpp opens. For `drafter = "mtp"`: the MTP
    assistant sidecar, or empty when the target carries its own MTP heads."""

    drafter: Literal["model", "mtp", "eagle3", "dflash"] = "model"
    """`model`: a separate draft GGUF; `mtp`: the target's MTP heads or an MTP sidecar;
    `eagle3` / `dflash`: an EAGLE-3 / DFlash head GGUF."""

    target_arch: str | None = None
    """`general.architecture` read from the target's header when it was pulled."""

    recommended_k: int | Literal["auto"] = "auto"
    """Draft length to start with."""

    description: str = ""
    """Copied from the catalog (or made up for an ad-hoc pair)."""

    adhoc: bool = False
    """True for a pair pulled with `--target/--draft` rather than from the catalog."""

    pulled_at: str = ""
    """ISO timestamp of the pull."""

    @model_validator(mode="after")
    def _draft_for_model_drafter(self) -> PulledPair:
        if self.drafter != "mtp" and not self.draft:
            raise ValueError(f"a pair drafted by {self.drafter!r} needs its draft file")
        return self

    def files(self) -> list[PulledFile]:
        return [*self.target, *self.draft]


class PulledRecord(BaseModel):
    """The whole record file."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    """Format version."""

    pairs: dict[str, PulledPair] = {}
    """Pair name -> what was pulled."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_record(path: Path | None = None) -> PulledRecord:
    """The current record; an empty one when nothing was pulled yet."""
    path = path or paths.pulled_record_path()
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # nothing pulled (or a home that is a file)
        return PulledRecord()
    except UnicodeDecodeError as error:
        raise CatalogError(f"{path} is damaged (not UTF-8 text: {error.reason}); "
                           "delete it and pull the pairs again") from None
    try:
        return PulledRecord.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as error:
        reason = str(error).splitlines()[0]
        raise CatalogError(
            f"{path} is damaged ({reason}); delete it and pull the pairs again"
        ) from None


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to a temp file beside `path`, then rename it over `path`."""
    paths.ensure(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An inter-process (and inter-thread) lock beside `path`."""
    from filelock import FileLock

    paths.ensure(path.parent)
    with FileLock(str(path) + ".lock"):
        yield


def update_record(change: Callable[[PulledRecord], None], path: Path | None = None) -> PulledRecord:
    """Apply `change` to the record under the lock and write the result atomically."""
    path = path or paths.pulled_record_path()
    with locked(path):
        record = read_record(path)
        change(record)
        write_atomic(path, record.model_dump_json(indent=2) + "\n")
    return record


def add_pair(name: str, pair: PulledPair) -> None:
    def change(record: PulledRecord) -> None:
        record.pairs[name] = pair

    update_record(change)


def remove_pair(name: str) -> PulledPair | None:
    """Forget `name`; return what was recorded (None if it was not)."""
    removed: list[PulledPair] = []

    def change(record: PulledRecord) -> None:
        pair = record.pairs.pop(name, None)
        if pair is not None:
            removed.append(pair)

    update_record(change)
    return removed[0] if removed else None
