"""The SQLite conversation store: saved as it happens, reopened after a crash."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path


def test_messages_are_on_disk_as_soon_as_they_are_added(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "chats.sqlite3")
    chat = store.new_chat("tiny")
    store.add_message(chat, "system", "Be brief.")
    store.add_message(chat, "user", "Hello   there\nfriend")
    reply = store.add_message(chat, "assistant", "Hi", complete=False)
    # another connection (another process after a crash) sees them without any close/commit
    other = sqlite3.connect(tmp_path / "chats.sqlite3")
    rows = other.execute("SELECT role, content, complete FROM messages ORDER BY id").fetchall()
    assert rows == [
        ("system", "Be brief.", 1), ("user", "Hello   there\nfriend", 1), ("assistant", "Hi", 0)
    ]
    store.update_message(reply, "Hi, how can I help?", complete=True, stats={"acceptance": 0.5})
    [summary] = store.list_chats()
    assert summary.title == "Hello there friend"
    assert summary.pair == "tiny" and summary.n_messages == 3
    assert store.messages(chat)[-1].stats == {"acceptance": 0.5}
    assert store.messages(chat)[-1].complete


def test_a_partial_reply_survives_a_killed_process(tmp_path: Path) -> None:
    db = tmp_path / "chats.sqlite3"
    script = (
        "import os, sys; from pathlib import Path; from spectui.chat.store import ChatStore\n"
        f"s = ChatStore(Path({str(db)!r})); c = s.new_chat('p'); s.add_message(c, 'user', 'q')\n"
        "m = s.add_message(c, 'assistant', '', complete=False)\n"
        "s.update_message(m, 'half a rep', complete=False)\n"
        "os._exit(9)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], check=False)
    assert result.returncode == 9
    store = ChatStore(db)
    chat = store.last_chat_id()
    assert chat is not None
    messages = store.messages(chat)
    assert [(m.role, m.content, m.complete) for m in messages] == [
        ("user", "q", True), ("assistant", "half a rep", False)
    ]


def test_last_chat_is_the_one_changed_last(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    assert store.last_chat_id() is None
    first = store.new_chat()
    second = store.new_chat()
    assert store.last_chat_id() == second
    store.add_message(first, "user", "back to the first")
    assert store.last_chat_id() == first
    store.delete_chat(first)
    assert store.last_chat_id() == second
    assert [c.id for c in store.list_chats()] == [second]


def test_store_uses_the_spectui_data_dir(spectui_home: Path) -> None:
    store = ChatStore(chats_db_path())
    store.new_chat()
    assert chats_db_path().is_relative_to(spectui_home)
    assert chats_db_path().exists()
    mode = sqlite3.connect(chats_db_path()).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
