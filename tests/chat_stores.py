"""Chat stores the tests write or damage: a store full of chats (`make_store`), one as an older
schema wrote it (`version_1_store`), two saved chats with figures (`saved_chats`), a page of the
SQLite file overwritten (`page_holding`, `overwrite_page`), the damaged copies spectui keeps
aside, the last saved reply, and a chat's turns as the app saved them (`saved`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from spectui.chat.chat_settings import ChatSettings
from spectui.chat.conversation import Conversation
from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path
from spectui.session.figures import ReplyFigures


def make_store(path: Path, n_chats: int = 6, n_messages: int = 40) -> dict[int, list[str]]:
    """A real store with a few chats; returns chat id -> its message texts, in order."""
    store = ChatStore(path)
    chats: dict[int, list[str]] = {}
    for c in range(n_chats):
        chat = store.new_chat("tiny")
        texts = [f"chat {c} message {m} {FILLER}" for m in range(n_messages)]
        for m, text in enumerate(texts):
            store.add_message(chat, "user" if m % 2 == 0 else "assistant", text, stats={"tokens": m})
        chats[chat] = texts
    store.close()  # the last connection checkpoints the WAL into the file
    return chats


def page_holding(path: Path, marker: bytes) -> int:
    """The 1-based page number of the page where `marker` is stored."""
    offset = path.read_bytes().index(marker)
    return offset // PAGE + 1


def overwrite_page(path: Path, page: int, seed: int = 7) -> bytes:
    garbage = bytes(range(256)) * (PAGE // 256)
    garbage = garbage[seed:] + garbage[:seed]
    with path.open("r+b") as f:
        f.seek((page - 1) * PAGE)
        f.write(garbage)
    return path.read_bytes()


def damaged_copies(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if ".damaged-" in p.name and not p.name.endswith(("-wal", "-shm")))


VERSION_1 = """
CREATE TABLE chats (id INTEGER PRIMARY KEY, title TEXT NOT NULL DEFAULT '', pair TEXT NOT NULL DEFAULT '',
                    created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY, chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
                       role TEXT NOT NULL, content TEXT NOT NULL, complete INTEGER NOT NULL DEFAULT 1,
                       stats TEXT, created_at TEXT NOT NULL);
CREATE INDEX messages_by_chat ON messages(chat_id, id);
"""


VERSION_1_FILLER = "gears and chains " * 20


def version_1_store(path: Path, n_chats: int = 1, n_messages: int = 2) -> None:
    """A store as spectui wrote it before schema 2."""
    db = sqlite3.connect(path)
    db.executescript(VERSION_1)
    for c in range(1, n_chats + 1):
        db.execute("INSERT INTO chats VALUES (?, ?, 'demo', '2026-01-01T10:00:00', '2026-01-01T10:05:00')",
                   (c, f"old chat {c}"))
        for m in range(n_messages):
            db.execute("INSERT INTO messages (chat_id, role, content, complete, stats, created_at) "
                       "VALUES (?, ?, ?, 1, ?, '2026-01-01T10:01:00')",
                       (c, "user" if m % 2 == 0 else "assistant", f"chat {c} message {m} {VERSION_1_FILLER}",
                        '{"tokens": 3}'))
    db.commit()
    db.close()


def saved_chats(home: Path) -> tuple[int, int]:
    """Two chats: a reasoning one (with settings, mode, models) and a later plain one."""
    store = ChatStore(chats_db_path())
    first = Conversation(store, "tiny", "Be brief.", ChatSettings(temperature=0.8, seed=7))
    first.update(mode="chat", models={"pair": "tiny", "target": "/models/target.gguf", "draft": "/models/draft.gguf"})
    first.add_user("How many gears?")
    first.start_reply()
    first.finish_reply("\n\nFour **gears**.", FIGURES, "Let me count.")
    second = Conversation(store, "tiny")
    second.add_user("Second chat")
    second.start_reply()
    second.finish_reply("Hello", ReplyFigures(reason="eos", tokens=1))
    store.close()
    assert first.chat_id is not None and second.chat_id is not None
    return first.chat_id, second.chat_id


def saved_reply() -> tuple[str, bool, dict]:
    """The last saved message of the last chat: (content, complete, stats)."""
    store = ChatStore(chats_db_path())
    try:
        chat = store.last_chat_id()
        assert chat is not None
        last = store.messages(chat)[-1]
        assert last.role == "assistant"
        return last.content, last.complete, last.stats
    finally:
        store.close()


FIGURES = ReplyFigures(reason="eos", tokens=42, thinking_tokens=6, drafted=40, accepted=30, target_passes=16,
                       mean_accepted=2.5, tps=88.0, k="4", decode_tokens=41, decode_seconds=41 / 88)


PAGE = 4096


FILLER = "lorem ipsum dolor sit amet " * 12  # ~320 bytes: about ten messages per page


def saved(chat: int | None = None) -> list[tuple[str, str]]:
    store = ChatStore(chats_db_path())
    chat = chat or store.last_chat_id()
    assert chat is not None
    return [(m.role, m.content) for m in store.messages(chat)]
