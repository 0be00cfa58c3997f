"""A damaged, foreign, full or unwritable chat store never takes the app down and never loses a chat.

Real SQLite files throughout: garbage bytes, a real store with one page overwritten, a full
"disk" (SQLite's own page limit, which fails writes exactly as a full disk does), and a home that
cannot be a directory (a file where it should be: root ignores permission bits, so a chmod-based
read-only directory is tested only for other users).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from chat_stores import damaged_copies, make_store, overwrite_page, page_holding

from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.chat.salvage import RECOVERED_TITLE
from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path
from spectui.session.figures import ReplyFigures


def integrity_ok(path: Path) -> bool:
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    except sqlite3.DatabaseError:
        return False
    finally:
        db.close()


def one_notice(store: SafeStore) -> str:
    assert len(store.notices) == 1, store.notices
    line = store.notices[0][0]
    assert "\n" not in line
    return line


def test_garbage_store_is_moved_aside_and_a_fresh_one_is_used(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    garbage = b"this is not a database, it is a shopping list\n" * 100
    path.write_bytes(garbage)
    store = SafeStore(path)
    line = one_notice(store)
    [aside] = damaged_copies(tmp_path)
    assert aside.read_bytes() == garbage  # kept as it was, never deleted
    assert "damaged (file is not a database)" in line and str(aside) in line
    assert "no chat could be read" in line
    assert store.saving
    chat = store.new_chat("tiny")
    assert chat is not None and store.add_message(chat, "user", "hello") is not None
    assert [c.title for c in ChatStore(path).list_chats()] == ["hello"]


def test_a_store_with_one_corrupt_page_keeps_every_readable_chat(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    chats = make_store(path)
    victim = page_holding(path, b"chat 3 message 20 ")
    assert victim > 2  # a page of the messages table, in the middle of the file
    corrupted = overwrite_page(path, victim)
    assert not integrity_ok(path)

    store = SafeStore(path)
    line = one_notice(store)
    [aside] = damaged_copies(tmp_path)
    assert aside.read_bytes() == corrupted
    assert f"moved to {aside}" in line and "were recovered" in line
    assert integrity_ok(path)

    recovered = {c.id: [m.content for m in store.messages(c.id)] for c in store.list_chats()}
    assert set(recovered) == set(chats)  # every chat is still there
    for chat, texts in chats.items():
        assert set(recovered[chat]) <= set(texts)  # nothing invented or garbled
        assert recovered[chat] == [t for t in texts if t in recovered[chat]]  # in order
    lost = sum(len(texts) for texts in chats.values()) - sum(map(len, recovered.values()))
    assert 0 < lost <= 15  # only the rows of the overwritten page
    assert not any(t.startswith("chat 3 message 20 ") for t in recovered[4])
    untouched = [c for c in chats if c != 4]
    assert all(recovered[c] == chats[c] for c in untouched)
    assert store.messages(1)[3].stats == {"tokens": 3}


def test_messages_whose_chat_row_is_lost_are_kept_under_a_recovered_chat(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    chats = make_store(path, n_chats=3, n_messages=6)
    db = sqlite3.connect(path)
    [(root,)] = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chats'").fetchall()
    assert db.execute("SELECT count(*) FROM chats").fetchone() == (3,)  # three rows: one page
    db.close()
    overwrite_page(path, root)
    store = SafeStore(path)
    assert "3 chats (18 messages) were recovered" in one_notice(store)
    listed = store.list_chats()
    assert {c.title for c in listed} == {RECOVERED_TITLE}
    assert {c.id: [m.content for m in store.messages(c.id)] for c in listed} == chats


def test_a_truncated_store_gives_back_the_chats_in_its_first_half(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    chats = make_store(path, n_chats=4, n_messages=20)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 100])  # a copy cut short, mid-page
    store = SafeStore(path)
    line = one_notice(store)
    assert "recovered from it" in line
    recovered = {c.id: [m.content for m in store.messages(c.id)] for c in store.list_chats()}
    assert recovered and all(recovered[c] == chats[c][: len(recovered[c])] for c in recovered)
    assert recovered[1] == chats[1]  # the first chat's pages were all in the first half
    [aside] = damaged_copies(tmp_path)
    assert aside.read_bytes() == data[: len(data) // 2 + 100]


@pytest.mark.parametrize("thing", ["directory", "fifo", "dangling link"])
def test_something_else_at_the_store_path_means_unsaved_not_a_crash(tmp_path: Path, thing: str) -> None:
    path = tmp_path / "chats.sqlite3"
    if thing == "directory":
        path.mkdir()
    elif thing == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(tmp_path / "missing" / "chats.sqlite3")
    store = SafeStore(path)
    line = one_notice(store)
    assert "this chat runs unsaved" in line and str(path) in line and "SPECTUI_HOME=" in line
    assert store.new_chat("tiny") is not None


def test_garbage_beside_a_good_store_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    chats = make_store(path, n_chats=1, n_messages=5)
    (tmp_path / "chats.sqlite3-wal").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "chats.sqlite3-shm").write_bytes(bytes(range(256)) * 160)
    store = SafeStore(path)
    assert store.notices == []
    assert [m.content for m in store.messages(1)] == chats[1]


def test_a_foreign_database_is_moved_aside_not_written_into(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE chats (name TEXT)")
    other.execute("INSERT INTO chats VALUES ('not ours')")
    other.commit()
    other.close()
    store = SafeStore(path)
    assert "table chats has columns" in one_notice(store)
    [aside] = damaged_copies(tmp_path)
    assert sqlite3.connect(aside).execute("SELECT name FROM chats").fetchall() == [("not ours",)]
    assert store.list_chats() == []


def test_a_home_that_cannot_be_a_directory_runs_unsaved_and_says_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.write_text("a file where the spectui home should be")
    monkeypatch.setenv("SPECTUI_HOME", str(home))
    store = SafeStore(chats_db_path())
    line = one_notice(store)
    assert "runs unsaved" in line and str(home / "data") in line and "SPECTUI_HOME=" in line
    assert not store.saving
    conversation = Conversation(store, "tiny")
    conversation.add_user("still works")
    conversation.start_reply()
    conversation.finish_reply("in memory", ReplyFigures(reason="eos", tokens=2))
    assert [m.content for m in store.messages(conversation.chat_id)] == ["still works", "in memory"]
    assert home.read_text() == "a file where the spectui home should be"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories; the test "
                    "above covers an unwritable home with a file where the directory should be")
def test_a_read_only_directory_runs_unsaved_but_shows_the_old_chats(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    chats = make_store(data / "chats.sqlite3", n_chats=2, n_messages=4)
    data.chmod(0o500)
    try:
        store = SafeStore(data / "chats.sqlite3")
        line = one_notice(store)
        assert "runs unsaved" in line and str(data) in line and "2 past chats can still be read" in line
        assert {c.id for c in store.list_chats()} == set(chats)
    finally:
        data.chmod(0o700)


def _fill_the_disk(store: SafeStore, path: Path) -> None:
    """SQLite's page limit makes every write that needs a new page fail with SQLITE_FULL,
    'database or disk is full', exactly as a full disk does."""
    db = sqlite3.connect(path)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    store._store._db.execute(f"PRAGMA max_page_count = {pages}")


def test_failed_writes_are_retried_reported_once_and_the_chat_is_saved_later(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = SafeStore(path)
    seen: list[tuple[str, str]] = []
    store.attach(lambda line, severity: seen.append((line, severity)))
    conversation = Conversation(store, "tiny", system="Be brief.")
    conversation.add_user("first question")
    _fill_the_disk(store, path)
    conversation.start_reply()
    conversation.finish_reply("a long answer " * 2000, ReplyFigures(reason="eos", tokens=2000))
    conversation.add_user("second question " * 500)
    [(line, severity)] = seen
    assert severity == "error" and "database or disk is full" in line and "even after a retry" in line
    assert "could not save the reply" in line
    store._store._db.execute("PRAGMA max_page_count = 1000000")  # space again
    conversation.start_reply()
    conversation.finish_reply("short", ReplyFigures(reason="eos", tokens=1))
    assert "saved again" in seen[-1][0]
    saved = ChatStore(path)
    [chat] = saved.list_chats()
    rows = [(m.role, m.content, m.complete) for m in saved.messages(chat.id)]
    assert rows == [
        ("system", "Be brief.", True), ("user", "first question", True),
        ("assistant", "a long answer " * 2000, True), ("user", "second question " * 500, True),
        ("assistant", "short", True),
    ]
    assert ReplyFigures.from_stored(saved.messages(chat.id)[2].stats) == ReplyFigures(reason="eos", tokens=2000)


def test_damage_found_mid_chat_moves_the_store_aside_and_keeps_the_chat(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    old = make_store(path, n_chats=2, n_messages=20)
    store = SafeStore(path)
    seen: list[str] = []
    store.attach(lambda line, severity: seen.append(line))
    conversation = Conversation(store, "tiny")
    conversation.add_user("before the damage")
    conversation.start_reply()
    conversation.finish_reply("an answer", ReplyFigures(reason="eos"))
    # Another process writes (so this connection must read the file again), then the page that
    # holds the open chat's messages (the last page of the table, where the next one goes) is lost.
    other = sqlite3.connect(path)
    other.execute("UPDATE chats SET title = 'touched' WHERE id = 1")
    other.commit()
    other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    other.close()
    overwrite_page(path, page_holding(path, b"before the damage"))
    conversation.add_user("after the damage")
    assert len(seen) == 1 and "damaged" in seen[0] and "moved to" in seen[0]
    assert len(damaged_copies(tmp_path)) == 1
    conversation.start_reply()
    conversation.finish_reply("still saved", ReplyFigures(reason="eos"))
    fresh = ChatStore(path)
    assert integrity_ok(path)
    chats = {c.id: [m.content for m in fresh.messages(c.id)] for c in fresh.list_chats()}
    assert ["before the damage", "an answer", "after the damage", "still saved"] in chats.values()
    assert chats[1] == old[1]  # the other chats survived, less the rows of the lost page
    assert set(chats[2]) <= set(old[2]) and chats[2][:5] == old[2][:5]
    assert len(chats) == 3  # no half copy of the open chat is left behind


def test_stats_that_are_not_json_read_as_no_stats(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path)
    chat = store.new_chat()
    message = store.add_message(chat, "assistant", "hi")
    store._db.execute("UPDATE messages SET stats = '{not json' WHERE id = ?", (message,))
    store._db.execute("UPDATE messages SET content = CAST(x'ff41' AS TEXT) WHERE id = ?", (message,))
    [stored] = store.messages(chat)
    assert stored.stats == {} and stored.content == "\ufffdA"
