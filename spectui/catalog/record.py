"""The record of pulled pairs (`paths.pulled_record_path()`, JSON).

Writes are read-modify-write under a file lock and land atomically (temp file + `os.replace`),
so two pulls finishing at once both end up recorded and a crash never leaves half a file.

No download is ever orphaned. A file spectui downloaded (`owned`) stays owned by some recorded
pair as long as one uses it: when its pair leaves the record (`remove_pair`, or replaced by
`add_pair`), the other pairs that use the file own it from then on (`_hand_over`), so the last one
removed deletes it. When a pair is recorded over another of the same name, the downloads no
other pair uses stay recorded under the old pair, kept as `NAME-old` (then `NAME-old-2`, ...),
so `spectui rm NAME-old` still deletes them (`add_pair` returns what became of them).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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

    drafter: Literal["model", "mtp", "eagle3", "dflash", "dspark", "dflash2"] = "model"
    """`model`: a separate draft GGUF; `mtp`: the target's MTP heads or an MTP sidecar;
    `eagle3` / `dflash` / `dspark` / `dflash2`: such a head GGUF."""

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
    """Write `text` to a temp file beside `path`, fsync it, then rename it over `path`."""
    from spectui.user_files import replace_file

    paths.ensure(path.parent)
    replace_file(path, text)


LOCK_QUIET_WAIT = 1.0
"""Seconds the lock is waited for before saying so (another spectui's update takes milliseconds)."""
LOCK_TIMEOUT = 60.0
"""Seconds after which waiting for the lock ends in one line (its holder is stuck or stopped)."""


def _say_waiting(line: str) -> None:
    from spectui.safe_text import line as safe_line

    print(f"spectui: {safe_line(line)}", file=sys.stderr, flush=True)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An inter-process (and inter-thread) lock beside `path`. Held by another process for more
    than `LOCK_QUIET_WAIT` seconds, it is waited for with one line on stderr; after
    `LOCK_TIMEOUT` seconds, `CatalogError` (the lock goes with the process that holds it: only a
    live one, stuck or stopped with Ctrl+Z, can hold it that long)."""
    from filelock import FileLock, Timeout

    paths.ensure(path.parent)
    lock = FileLock(str(path) + ".lock")
    try:
        lock.acquire(timeout=min(LOCK_QUIET_WAIT, LOCK_TIMEOUT))
    except Timeout:
        _say_waiting(f"waiting for another spectui (a pull, rm or pair add) to finish with {path} "
                     f"(at most {LOCK_TIMEOUT:.0f} s)…")
        try:
            lock.acquire(timeout=max(LOCK_TIMEOUT - LOCK_QUIET_WAIT, 0.0))
        except Timeout:
            raise CatalogError(f"another process has held {lock.lock_file} for {LOCK_TIMEOUT:.0f} s, so {path} "
                               "was not changed: let that spectui finish (or end it), "
                               "then try again") from None
    try:
        yield
    finally:
        lock.release()


def update_record(change: Callable[[PulledRecord], None], path: Path | None = None) -> PulledRecord:
    """Apply `change` to the record under the lock and write the result atomically."""
    path = path or paths.pulled_record_path()
    with locked(path):
        record = read_record(path)
        change(record)
        write_atomic(path, record.model_dump_json(indent=2) + "\n")
    return record


@dataclass(frozen=True)
class Replaced:
    """What became of a pair that `add_pair` recorded another over."""

    name: str
    kept_as: str | None
    """The name the old pair is kept under, when it held downloads no pair uses any more."""
    files: tuple[PulledFile, ...]
    """Those downloads (spectui's own files, `owned`), now only in `kept_as`."""

    def describe(self) -> str:
        """One line: what became of the replaced pair's files."""
        if self.kept_as is None:
            return f"replaced pair {self.name}; it held no download that only it used"
        size = sum(f.size for f in self.files) / 1e9
        return (f"replaced pair {self.name}; its {len(self.files)} downloaded file(s) ({size:.1f} GB) are kept as "
                f"pair {self.kept_as}: `spectui rm {self.kept_as}` deletes them")


class PairExists(CatalogError):
    """`add_pair` without `replace` found the name taken."""


def add_pair(name: str, pair: PulledPair, *, replace: bool = True) -> Replaced | None:
    """Record `pair` as `name`; with `replace` False a recorded `name` is refused (`PairExists`).

    Returns None when `name` was new, else what became of the pair it replaces: downloads that
    only it used are kept, the old pair renamed (`Replaced.kept_as`), never forgotten.
    """
    replaced: list[Replaced] = []

    def change(record: PulledRecord) -> None:
        old = record.pairs.get(name)
        if old is not None and not replace:
            raise PairExists(f"pair {name} already exists; add --replace to replace it, or pick another name")
        record.pairs[name] = pair
        if old is None:
            return
        orphans = _hand_over(old.files(), record)
        kept = _unused_name(f"{name}-old", record) if orphans else None
        if kept is not None:
            record.pairs[kept] = old.model_copy(update={
                "adhoc": True, "description": f"replaced {name} on {now()[:10]}: {old.description}".strip()})
        replaced.append(Replaced(name, kept, orphans))

    update_record(change)
    return replaced[0] if replaced else None


def _hand_over(leaving: list[PulledFile], record: PulledRecord) -> tuple[PulledFile, ...]:
    """The owned files among `leaving` (the files of a pair leaving the record): each one another
    recorded pair uses is owned by that pair from now on; the ones no pair uses are returned."""
    unused = []
    for file in leaving:
        if not file.owned:
            continue
        key = Path(file.path).resolve()
        users = [other for pair in record.pairs.values() for other in pair.files()
                 if Path(other.path).resolve() == key and other is not file]
        for other in users:
            other.owned = True
        if not users:
            unused.append(file)
    return tuple(unused)


def _unused_name(base: str, record: PulledRecord) -> str:
    for n in range(1, len(record.pairs) + 2):
        name = base if n == 1 else f"{base}-{n}"
        if name not in record.pairs:
            return name
    raise AssertionError("unreachable: more names tried than pairs recorded")


def remove_pair(name: str) -> PulledPair | None:
    """Forget `name`; return what was recorded (None if it was not)."""
    removed: list[PulledPair] = []

    def change(record: PulledRecord) -> None:
        pair = record.pairs.pop(name, None)
        if pair is not None:
            _hand_over(pair.files(), record)
            removed.append(pair)

    update_record(change)
    return removed[0] if removed else None
