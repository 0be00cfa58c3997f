"""Conversations saved as they happen, in SQLite (stdlib `sqlite3`, WAL journal).

Every statement commits on its own (autocommit), so a message is on disk as soon as it is
added, and a reply in progress is rewritten every few seconds with `complete = 0`: a crash
loses at most the last few seconds of one reply, and the reopened chat marks it interrupted.
The store is used from the UI thread only.

`ChatStore` raises `sqlite3.Error` on any failure; the app uses it through `SafeStore`
(`spectui.chat.safe_store`), which moves a damaged file aside, salvages its chats, retries
failed writes and falls back to memory, so that the store never takes the app down.

Schema version 2 (`PRAGMA user_version`) added a chat's settings, mode and models, and a reply's
reasoning. A version-1 store (exactly the old columns) gains them when opened, in one
transaction; a table with any other columns is not ours and is never altered (`check` refuses it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    pair TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    settings TEXT,
    mode TEXT NOT NULL DEFAULT '',
    models TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    complete INTEGER NOT NULL DEFAULT 1,
    stats TEXT,
    created_at TEXT NOT NULL,
    reasoning TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_by_chat ON messages(chat_id, id);
"""
SCHEMA_VERSION = 2
ADDED_IN_2 = {
    "chats": ("settings TEXT", "mode TEXT NOT NULL DEFAULT ''", "models TEXT"),
    "messages": ("reasoning TEXT NOT NULL DEFAULT ''",),
}
"""Columns version 2 added to version 1's tables (`ALTER TABLE … ADD COLUMN`)."""
TITLE_LENGTH = 60


def _now() -> str:
    return datetime.now().isoformat(timespec="microseconds")


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    content: str
    complete: bool
    stats: dict[str, Any] = field(default_factory=dict)
    reasoning: str = ""
    """What a reasoning model thought before this reply's answer (`content`)."""
    created_at: str = ""


@dataclass(frozen=True)
class ChatInfo:
    """One chat's own row: what it is called and how it runs (not its messages)."""

    id: int
    title: str
    pair: str
    created_at: str
    updated_at: str
    settings: dict[str, Any] = field(default_factory=dict)
    """`ChatSettings` as JSON (sampling, max tokens, thinking)."""
    mode: str = ""
    """`chat`, `completion` or `plain-chat` (empty: recorded before modes were saved)."""
    models: dict[str, Any] = field(default_factory=dict)
    """The models it last ran with: pair, target, draft, drafter."""


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    pair: str
    updated_at: str
    n_messages: int


LEGACY_COLUMNS = {
    "chats": ("id", "title", "pair", "created_at", "updated_at"),
    "messages": ("id", "chat_id", "role", "content", "complete", "stats", "created_at"),
}
"""Version 1's columns: what a store must have at least for salvage to read it."""
COLUMNS = {
    "chats": (*LEGACY_COLUMNS["chats"], "settings", "mode", "models"),
    "messages": (*LEGACY_COLUMNS["messages"], "reasoning"),
}
"""Every column of each table, in order: what `check` expects and what salvage copies."""


def decode_text(raw: bytes) -> str:
    """SQLite text as str; bytes that are not UTF-8 (a damaged page) become U+FFFD, not an error."""
    return raw.decode("utf-8", errors="replace")


class ChatStore:
    """All chats in one SQLite file, or in memory (`path=None`: nothing is saved)."""

    generation = 0
    """Bumped by `SafeStore` when it replaces its file; a plain store never changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if path is None else path, isolation_level=None)
        try:
            self._db.text_factory = decode_text
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _columns(self, table: str) -> tuple[str, ...]:
        return tuple(row[1] for row in self._db.execute(f"PRAGMA table_info({table})"))

    def _migrate(self) -> None:
        """Bring a version-1 store to this version; leave a table that is not ours alone."""
        legacy = [table for table, columns in LEGACY_COLUMNS.items() if self._columns(table) == columns]
        if not legacy:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version < SCHEMA_VERSION and all(self._columns(t) == c for t, c in COLUMNS.items()):
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a store made just now
            return
        with self.transaction():
            for table in legacy:
                for column in ADDED_IN_2[table]:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @property
    def saving(self) -> bool:
        """False for an in-memory store: its chats end with the app."""
        return self.path is not None

    def check(self) -> None:
        """Raise `sqlite3.DatabaseError` unless SQLite's quick check passes and both tables have
        exactly the expected columns (a file of another program, or damaged, fails here)."""
        result = [row[0] for row in self._db.execute("PRAGMA quick_check").fetchall()]
        if result != ["ok"]:
            raise sqlite3.DatabaseError(f"integrity check failed: {'; '.join(map(str, result[:3]))}")
        for table, columns in COLUMNS.items():
            found = self._columns(table)
            if found != columns:
                raise sqlite3.DatabaseError(f"table {table} has columns {found}, not {columns}")

    def close(self) -> None:
        self._db.close()

    def settle(self) -> None:
        """Write the WAL into the file and leave WAL mode, so that the store is one whole file
        (before it is renamed: a WAL does not follow its file). Raises if either cannot be done."""
        busy, _log, _done = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        mode = self._db.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        if busy or str(mode).lower() != "delete":
            raise sqlite3.OperationalError(f"the store's WAL could not be written into it (journal mode {mode})")

    def transaction(self) -> _Transaction:
        """`with store.transaction():` — all or nothing, so a retried write never doubles."""
        return _Transaction(self._db)

    # ----- chats ---------------------------------------------------------------------------

    def new_chat(self, pair: str = "") -> int:
        now = _now()
        cursor = self._db.execute(
            "INSERT INTO chats (pair, created_at, updated_at) VALUES (?, ?, ?)", (pair, now, now)
        )
        return int(cursor.lastrowid or 0)

    def last_chat_id(self) -> int | None:
        """The chat that changed last (the one `--resume` reopens)."""
        row = self._db.execute(
            "SELECT id FROM chats ORDER BY updated_at DESC, id DESC LIMIT 1"
        ).fetchone()
        return int(row[0]) if row else None

    def list_chats(self, limit: int = 100) -> list[ChatSummary]:
        rows = self._db.execute(
            "SELECT c.id, c.title, c.pair, c.updated_at, COUNT(m.id) FROM chats c "
            "LEFT JOIN messages m ON m.chat_id = c.id GROUP BY c.id "
            "ORDER BY c.updated_at DESC, c.id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [ChatSummary(int(i), t, p, u, int(n)) for i, t, p, u, n in rows]

    def chat_pair(self, chat_id: int) -> str:
        row = self._db.execute("SELECT pair FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def chat_info(self, chat_id: int) -> ChatInfo | None:
        row = self._db.execute(
            "SELECT id, title, pair, created_at, updated_at, settings, mode, models FROM chats WHERE id = ?",
            (chat_id,),
        ).fetchone()
        if row is None:
            return None
        chat, title, pair, created, updated, settings, mode, models = row
        return ChatInfo(int(chat), str(title), str(pair), str(created), str(updated), _load(settings),
                        str(mode or ""), _load(models))

    def update_chat(self, chat_id: int, *, pair: str | None = None, settings: dict[str, Any] | None = None,
                    mode: str | None = None, models: dict[str, Any] | None = None) -> bool:
        """Change what is given (None: unchanged); False when there is no such chat."""
        cursor = self._db.execute(
            "UPDATE chats SET pair = COALESCE(?, pair), settings = COALESCE(?, settings), "
            "mode = COALESCE(?, mode), models = COALESCE(?, models) WHERE id = ?",
            (pair, _dump(settings), mode, _dump(models), chat_id),
        )
        return cursor.rowcount == 1

    def delete_chat(self, chat_id: int) -> bool:
        self._db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
        return True

    def _touch(self, chat_id: int) -> None:
        self._db.execute("UPDATE chats SET updated_at = ? WHERE id = ?", (_now(), chat_id))

    # ----- messages ------------------------------------------------------------------------

    def add_message(self, chat_id: int, role: str, content: str, *, complete: bool = True,
                    stats: dict[str, Any] | None = None, reasoning: str = "") -> int:
        with self.transaction():
            cursor = self._db.execute(
                "INSERT INTO messages (chat_id, role, content, complete, stats, created_at, reasoning) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (chat_id, role, content, int(complete), _dump(stats), _now(), reasoning),
            )
            if role == "user":
                title = " ".join(content.split())[:TITLE_LENGTH]
                self._db.execute(
                    "UPDATE chats SET title = ? WHERE id = ? AND title = ''", (title, chat_id)
                )
            self._touch(chat_id)
        return int(cursor.lastrowid or 0)

    def update_message(self, message_id: int, content: str, *, complete: bool,
                       stats: dict[str, Any] | None = None, reasoning: str | None = None) -> bool:
        """Rewrite a message: a reply in progress (complete=False) or its final text.
        False when there is no such message (it was lost with a damaged page)."""
        cursor = self._db.execute(
            "UPDATE messages SET content = ?, complete = ?, stats = COALESCE(?, stats), "
            "reasoning = COALESCE(?, reasoning) WHERE id = ?",
            (content, int(complete), _dump(stats), reasoning, message_id),
        )
        return cursor.rowcount == 1

    def delete_messages(self, chat_id: int, message_ids: Sequence[int]) -> bool:
        """Delete these messages of the chat, all in one statement (an edited or regenerated
        turn and what followed it): afterwards either all are gone or none is."""
        ids = list(message_ids)
        if ids:
            marks = ", ".join("?" * len(ids))
            with self.transaction():
                self._db.execute(f"DELETE FROM messages WHERE chat_id = ? AND id IN ({marks})", (chat_id, *ids))
                self._touch(chat_id)
        return True

    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT id, role, content, complete, stats, reasoning, created_at FROM messages "
            "WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        ).fetchall()
        return [StoredMessage(int(i), str(r), str(c), bool(done), _load(s), str(think or ""), str(at))
                for i, r, c, done, s, think, at in rows]

    # ----- salvage: rows copied with their ids from a damaged store ---------------------------

    def restore_chat(self, row: tuple[Any, ...]) -> None:
        """A chat row with `COLUMNS["chats"]`, in that order."""
        self._restore("chats", row)

    def restore_message(self, row: tuple[Any, ...]) -> None:
        """A message row with `COLUMNS["messages"]`, in that order."""
        self._restore("messages", row)

    def _restore(self, table: str, row: tuple[Any, ...]) -> None:
        columns = COLUMNS[table]
        self._db.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                         f"VALUES ({', '.join('?' * len(columns))})", row)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        try:
            if kind is None:
                self._db.execute("COMMIT")
        finally:
            if self._db.in_transaction:  # an error, or a COMMIT that failed (disk full)
                self._db.execute("ROLLBACK")


def _dump(stats: dict[str, Any] | None) -> str | None:
    return json.dumps(stats) if stats is not None else None


def _load(text: str | None) -> dict[str, Any]:
    """Stats saved as JSON; anything unreadable (a damaged row) is no stats rather than an error."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
