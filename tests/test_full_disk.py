"""A full disk loses nothing: a repair never leaves fewer readable chats than it found, and a file
written over on purpose (`export -o FILE --force`, spectui's records) stays whole until its new
content is.

Each case runs the real command in its own process against a folder where writes fail: a small
full tmpfs where the test may mount one, and everywhere a per-process file size limit
(`full_disk.py`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chat_stores import make_store, overwrite_page, page_holding
from full_disk import KINDS, FullDisk, full_disk, no_space

from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path


@pytest.fixture(params=KINDS)
def disk(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    with full_disk(request.param, tmp_path, monkeypatch) as made:
        yield made


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("spectui: ")
    return lines[0]


def listed(disk: FullDisk) -> list[str]:
    """The chats `spectui export` lists (ids and titles), which a damaged store still gives."""
    done = disk.run("export")
    assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
    return done.stdout.splitlines()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") or ".damaged-" in p.name)


def damaged_store() -> Path:
    path = chats_db_path()
    path.parent.mkdir(parents=True)
    make_store(path, n_chats=6, n_messages=40)
    overwrite_page(path, page_holding(path, b"chat 2 message 12 "))
    return path


def test_a_repair_on_a_full_disk_leaves_the_damaged_store_in_place_and_readable(disk: FullDisk) -> None:
    path = damaged_store()
    before, chats = path.read_bytes(), listed(disk)
    assert len(chats) == 6
    disk.fill()
    done = disk.run("export", "--repair")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert f"the chat store {path} is damaged" in line and "was left as it is" in line and no_space(line)
    assert "recovered" not in line
    assert path.read_bytes() == before and leftovers(path.parent) == []
    assert listed(disk) == chats  # still read by export, not "no saved chats yet"
    done = disk.run("export", "--repair")
    assert done.returncode == 1 and "nothing to repair" not in done.stderr
    disk.make_room()
    done = disk.run("export", "--repair")
    assert done.returncode == 0, done.stderr
    assert "6 chats (" in done.stderr and "recovered from it into a fresh chats.sqlite3" in done.stderr
    assert listed(disk) == chats
    assert disk.run("export").returncode == 0  # sound now


def test_the_app_on_a_full_disk_keeps_the_damaged_store_and_runs_in_memory(disk: FullDisk) -> None:
    path = damaged_store()
    before = path.read_bytes()
    disk.fill()
    script = ("from spectui.chat.safe_store import SafeStore; from spectui.paths import chats_db_path\n"
              "s = SafeStore(chats_db_path()); print(s.saving, len(s.list_chats()))\n"
              "print(s.notices[0][0])\n")
    done = disk.run_python("-c", script)
    assert done.returncode == 0, done.stderr
    saving, notice = done.stdout.splitlines()
    assert saving == "False 6"
    assert "this chat runs unsaved" in notice and "6 past chats can still be read" in notice
    assert "moved to" not in notice  # SQLite cannot open it (tmpfs), or no repaired copy fits (fsize)
    assert path.read_bytes() == before and leftovers(path.parent) == []


def test_export_force_on_a_full_disk_keeps_the_file_it_would_replace(disk: FullDisk) -> None:
    store = ChatStore(chats_db_path())
    chat = store.new_chat("tiny")
    store.add_message(chat, "user", "a long question " * 20000)
    store.close()
    mine = disk.folder / "notes.md"
    mine.write_text("my own notes\n")
    disk.fill()
    done = disk.run("export", "--last", "-o", str(mine), "--force")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert f"cannot write the export to {mine}" in line and no_space(line)
    assert mine.read_text() == "my own notes\n" and leftovers(disk.folder) == []
    disk.make_room()
    done = disk.run("export", "--last", "-o", str(mine), "--force")
    assert done.returncode == 0, done.stderr
    assert ("a long question " * 20000).strip() in mine.read_text()


def test_export_to_a_new_file_on_a_full_disk_leaves_no_part_of_one(disk: FullDisk) -> None:
    store = ChatStore(chats_db_path())
    store.add_message(store.new_chat("tiny"), "user", "a long question " * 20000)
    store.close()
    new = disk.folder / "chat.md"
    disk.fill()
    done = disk.run("export", "--last", "-o", str(new))
    assert done.returncode == 1 and no_space(one_line(done.stderr))
    assert not new.exists() and leftovers(disk.folder) == []


def test_a_replaced_file_keeps_its_mode_and_a_link_keeps_pointing_at_it(tmp_path: Path) -> None:
    from spectui.user_files import replace_file

    mine = tmp_path / "mine.md"
    mine.write_text("old")
    os.chmod(mine, 0o640)
    link = tmp_path / "link.md"
    link.symlink_to(mine)
    assert replace_file(link, "new") == mine
    assert link.is_symlink() and mine.read_text() == "new" and (mine.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "mine.md"]


def test_a_record_update_on_a_full_disk_keeps_the_record_whole_and_names_it(disk: FullDisk) -> None:
    from spectui import paths
    from spectui.catalog import record

    for n in range(8):  # a record larger than what the fsize limit lets a file grow to
        model = disk.folder / f"model-{n}.gguf"
        model.write_bytes(b"GGUF")
        files = [record.PulledFile(path=str(model), size=4)]
        record.add_pair(f"pair-{n}", record.PulledPair(target=files, draft=files, adhoc=True,
                                                       description="a pair " * 20))
    path = paths.pulled_record_path()
    before = path.read_bytes()
    disk.fill()
    done = disk.run("rm", "pair-3")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert f"cannot use {path} (" in line and no_space(line)
    assert path.read_bytes() == before and leftovers(path.parent) == []
