"""Conversations saved as they happen, in SQLite (stdlib `sqlite3`, WAL journal).

Every statement commits on its own (autocommit), so a message is on disk as soon as it is
added, and a reply in progress is rewritten every few seconds with `complete = 0`: a crash
loses at most the last few seconds of one reply, and the reopened chat marks it interrupted.
The store is used from the UI thread only.
"""

from __future__ import annotations

import json
import sqlite3
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
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    complete INTEGER NOT NULL DEFAULT 1,
    stats TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_chat ON messages(chat_id, id);
"""
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


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    pair: str
    updated_at: str
    n_messages: int


class ChatStore:
    """All chats in one SQLite file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

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

    def delete_chat(self, chat_id: int) -> None:
        self._db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    def _touch(self, chat_id: int) -> None:
        self._db.execute("UPDATE chats SET updated_at = ? WHERE id = ?", (_now(), chat_id))

    # ----- messages ------------------------------------------------------------------------

    def add_message(self, chat_id: int, role: str, content: str, *, complete: bool = True,
                    stats: dict[str, Any] | None = None) -> int:
        cursor = self._db.execute(
            "INSERT INTO messages (chat_id, role, content, complete, stats, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (chat_id, role, content, int(complete), _dump(stats), _now()),
        )
        if role == "user":
            title = " ".join(content.split())[:TITLE_LENGTH]
            self._db.execute(
                "UPDATE chats SET title = ? WHERE id = ? AND title = ''", (title, chat_id)
            )
        self._touch(chat_id)
        return int(cursor.lastrowid or 0)

    def update_message(self, message_id: int, content: str, *, complete: bool,
                       stats: dict[str, Any] | None = None) -> None:
        """Rewrite a message: a reply in progress (complete=False) or its final text."""
        self._db.execute(
            "UPDATE messages SET content = ?, complete = ?, stats = COALESCE(?, stats) "
            "WHERE id = ?",
            (content, int(complete), _dump(stats), message_id),
        )

    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT id, role, content, complete, stats FROM messages WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        ).fetchall()
        return [StoredMessage(int(i), r, c, bool(done), _load(s)) for i, r, c, done, s in rows]


def _dump(stats: dict[str, Any] | None) -> str | None:
    return json.dumps(stats) if stats is not None else None


def _load(text: str | None) -> dict[str, Any]:
    return json.loads(text) if text else {}
