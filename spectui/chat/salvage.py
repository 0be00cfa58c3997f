"""What can still be read from a damaged chat store, and the name it is moved aside under.

Python's sqlite3 has no `.recover` (that is a feature of the sqlite3 shell), so the salvage is
plain SQL. Each table is read in rowid order, 256 rows at a time while the pages are sound; a
batch that fails is read again one row at a time (`WHERE rowid > ? ORDER BY rowid LIMIT 1`, each
step a fresh descent of the table's b-tree). A step that fails has hit an unreadable page: the
walk gallops forward (last + 1, 2, 4, ...) until a step succeeds, then binary-searches back to
the first readable row after the damage, so only the rows on damaged pages are lost. Indexes are
never used (a damaged index loses nothing), and a row whose values are unreadable or of the wrong
type is skipped. Messages whose chat row was lost are kept under a "(recovered chat)" title.
A truncated file is read through a copy whose header counts only the pages that are there.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from spectui.chat.store import COLUMNS, LEGACY_COLUMNS, ChatStore, decode_text

SQLITE_CORRUPT, SQLITE_NOTADB = 11, 26
BATCH = 256
LOWEST_ROWID, HIGHEST_ROWID = -(2**63), 2**63 - 1
SIDE_FILES = ("", "-wal", "-shm", "-journal")
ROLES = frozenset({"system", "user", "assistant"})
RECOVERED_TITLE = "(recovered chat)"


def is_damage(error: sqlite3.Error) -> bool:
    """True when the file itself is bad (not a database, malformed, failed its check), as opposed
    to a write that failed (read-only, full, locked), which is worth retrying."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return True
    return type(error) is sqlite3.DatabaseError


def aside_path(path: Path, now: datetime | None = None) -> Path:
    """`chats.sqlite3.damaged-20261123-041200` (with -2, -3 ... if that name is taken)."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 2
    while any(candidate.with_name(candidate.name + s).exists() for s in SIDE_FILES):
        candidate = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
        n += 1
    return candidate


@dataclass(frozen=True)
class Salvaged:
    chats: int
    messages: int

    def describe(self) -> str:
        if not self.messages:
            return "no chat could be read from it"
        chats = "1 chat" if self.chats == 1 else f"{self.chats} chats"
        messages = "1 message" if self.messages == 1 else f"{self.messages} messages"
        return f"{chats} ({messages}) {'was' if self.chats == 1 else 'were'} recovered from it"


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open without writing anything: read-only (with its WAL), else as an immutable file
    (a WAL database in a read-only directory cannot be opened read-only)."""
    uri = path.resolve().as_uri()
    first: sqlite3.Error | None = None
    for mode in ("mode=ro", "immutable=1"):
        db = sqlite3.connect(f"{uri}?{mode}", uri=True)
        db.text_factory = decode_text
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error as error:
            first = first or error
            db.close()
    raise UnreadableStore(f"{path} cannot be read at all ({first})", first)


class UnreadableStore(sqlite3.DatabaseError):
    """`open_readonly` found nothing SQLite can read; `reason` is SQLite's own word for why."""

    def __init__(self, message: str, cause: sqlite3.Error | None) -> None:
        super().__init__(message)
        self.reason = str(cause) if cause is not None else "unreadable"


def page_size(header: bytes) -> int:
    """The page size a database header declares (bytes 16-17; 1 means 65536), 4096 if invalid."""
    size = int.from_bytes(header[16:18], "big") if len(header) >= 18 else 0
    size = 65536 if size == 1 else size
    return size if 512 <= size <= 65536 and size & (size - 1) == 0 else 4096


def truncated_copy(path: Path, into: Path) -> Path:
    """A copy of a truncated database that SQLite will open: whole pages only, and the header's
    page count (bytes 28-31) set to the pages that are there (it still counts the lost ones)."""
    data = bytearray(path.read_bytes())
    size = page_size(bytes(data[:100]))
    pages = len(data) // size
    del data[pages * size:]
    if pages:
        data[28:32] = pages.to_bytes(4, "big")
    into.write_bytes(bytes(data))
    return into


@contextmanager
def readable(path: Path) -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to `path`, or to a repaired copy of it (a truncated file); None
    when neither opens."""
    try:
        db = open_readonly(path)
    except (sqlite3.Error, OSError):
        db = None
    if db is not None:
        try:
            yield db
        finally:
            db.close()
        return
    with tempfile.TemporaryDirectory(prefix="spectui-salvage-") as scratch:
        try:
            db = open_readonly(truncated_copy(path, Path(scratch) / "copy.sqlite3"))
        except (sqlite3.Error, OSError):
            db = None
        try:
            yield db
        finally:
            if db is not None:
                db.close()


def damage(path: Path) -> str | None:
    """Why the store at `path` would be moved aside when the app opens it (what `ChatStore.check`
    and `SafeStore` refuse: not a database, a failed quick check, tables that are not ours), read
    without writing anything; None for a sound store (an older version or an empty file too)."""
    try:
        db = open_readonly(path)
    except sqlite3.Error as error:
        return _reason(error)
    except OSError as error:
        return error.strerror or str(error)
    try:
        result = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
        if result != ["ok"]:
            return f"integrity check failed: {'; '.join(map(str, result[:3]))}"
        for table in COLUMNS:
            found = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
            if found and found not in (COLUMNS[table], LEGACY_COLUMNS[table]):
                return f"table {table} has columns {found}, not {COLUMNS[table]}"
    except sqlite3.Error as error:
        return _reason(error)
    finally:
        db.close()
    return None


def _reason(error: sqlite3.Error) -> str:
    """SQLite's words for a file it cannot read ("file is not a database", "database disk image
    is malformed"), without the path `open_readonly` adds."""
    return error.reason if isinstance(error, UnreadableStore) else str(error)


def salvage(source: Path, into: ChatStore) -> Salvaged:
    """Copy every readable chat and message of `source` into `into`, keeping their ids."""
    with readable(source) as db:
        return Salvaged(0, 0) if db is None else _copy(db, into)


def _copy(db: sqlite3.Connection, into: ChatStore) -> Salvaged:
    chat_ids: set[int] = set()
    with_messages: set[int] = set()
    n_messages = 0
    with into.transaction():
        for row in readable_records(db, "chats"):
            if (chat := clean_chat(row)) is not None:
                into.restore_chat(chat)
                chat_ids.add(chat[0])
        for row in readable_records(db, "messages"):
            if (message := clean_message(row)) is None:
                continue
            chat_id, created = message[1], message[6]
            if chat_id not in chat_ids:
                into.restore_chat(chat_row(chat_id, {"title": RECOVERED_TITLE, "created_at": created}))
                chat_ids.add(chat_id)
            into.restore_message(message)
            with_messages.add(chat_id)
            n_messages += 1
    return Salvaged(len(with_messages), n_messages)


def readable_records(db: sqlite3.Connection, table: str) -> Iterator[dict[str, Any]]:
    """Every readable row of `table` as {column: value}: version 1's columns at least (else
    nothing: the table is not ours), and whichever later ones the store has."""
    found = _columns(db, table)
    if not set(LEGACY_COLUMNS[table]) <= found:
        return
    columns = tuple(c for c in COLUMNS[table] if c in found)
    for row in readable_rows(db, table, columns):
        yield dict(zip(columns, row, strict=True))


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    try:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    except sqlite3.Error:
        return set()


def readable_rows(db: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """Every row of `table` that can be read, in rowid order, skipping damaged pages."""
    if not set(columns) <= _columns(db, table):
        return
    batch_sql = f"SELECT rowid, {', '.join(columns)} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT {BATCH}"
    row_sql = f"SELECT {', '.join(columns)} FROM {table} WHERE rowid = ?"
    last: int | None = LOWEST_ROWID
    while last is not None:
        try:
            rows = db.execute(batch_sql, (last,)).fetchall()
        except sqlite3.Error:
            rows = None
        if rows is not None:
            if not rows:
                return
            for row in rows:
                yield tuple(row[1:])
            last = rows[-1][0]
            continue
        for _ in range(BATCH):  # the damage is near: step over it one row at a time
            last = _next_rowid(db, table, last)
            if last is None:
                return
            try:
                row = db.execute(row_sql, (last,)).fetchone()
            except sqlite3.Error:
                row = None
            if row is not None:
                yield tuple(row)


def _step(db: sqlite3.Connection, table: str, after: int) -> int | None:
    """The first rowid above `after` (None at the end); raises on an unreadable page."""
    found = db.execute(f"SELECT rowid FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 1", (after,)).fetchone()
    if found is None:
        return None
    if not isinstance(found[0], int) or found[0] <= after:
        raise sqlite3.DatabaseError("rowids out of order")
    return found[0]


def _next_rowid(db: sqlite3.Connection, table: str, last: int) -> int | None:
    """The next readable rowid after `last`, jumping over unreadable pages; None at the end."""
    try:
        return _step(db, table, last)
    except sqlite3.Error:
        pass
    distance = 1
    while True:  # gallop until a step succeeds
        if last + distance >= HIGHEST_ROWID:
            return None
        try:
            found = _step(db, table, last + distance)
            break
        except sqlite3.Error:
            distance *= 2
    low, high = distance // 2, distance  # step(last + low) failed, step(last + high) worked
    while high - low > 1:
        middle = (low + high) // 2
        try:
            found, high = _step(db, table, last + middle), middle
        except sqlite3.Error:
            low = middle
    return found


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return decode_text(value)
    return None


def clean_chat(row: dict[str, Any]) -> tuple[Any, ...] | None:
    """`COLUMNS["chats"]` with the right types (missing or unreadable values at their defaults),
    or None."""
    chat_id = row.get("id")
    return chat_row(chat_id, row) if isinstance(chat_id, int) else None


def chat_row(chat_id: int, row: dict[str, Any]) -> tuple[Any, ...]:
    """`COLUMNS["chats"]` for chat `chat_id` from `row`'s other values (defaults where unreadable)."""
    now = datetime.now().isoformat(timespec="microseconds")
    created = _text(row.get("created_at")) or now
    return (chat_id, _text(row.get("title")) or "", _text(row.get("pair")) or "", created,
            _text(row.get("updated_at")) or created, _text(row.get("settings")),
            _text(row.get("mode")) or "", _text(row.get("models")))


def clean_message(row: dict[str, Any]) -> tuple[Any, ...] | None:
    """`COLUMNS["messages"]` with the right types, or None."""
    message_id, chat_id = row.get("id"), row.get("chat_id")
    role, content = _text(row.get("role")), _text(row.get("content"))
    if not (isinstance(message_id, int) and isinstance(chat_id, int)) or role not in ROLES or content is None:
        return None
    done = 1 if row.get("complete") in (1, True) else 0
    now = datetime.now().isoformat(timespec="microseconds")
    return (message_id, chat_id, role, content, done, _text(row.get("stats")),
            _text(row.get("created_at")) or now, _text(row.get("reasoning")) or "")
