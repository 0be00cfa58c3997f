"""`spectui export` end to end, through `spectui.cli.main`, on a real store in a fresh home."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from chat_stores import FIGURES, saved_chats, version_1_store

from spectui.cli import main
from spectui.paths import chats_db_path
from spectui.session.figures import ReplyFigures


def test_markdown_has_the_turns_thinking_settings_and_each_replys_figures(spectui_home: Path, capsys) -> None:
    first, _ = saved_chats(spectui_home)
    assert main(["export", str(first)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# How many gears?\n")
    assert "- pair tiny (target.gguf + draft.gguf)" in text and "- mode: chat" in text
    assert "- settings: T=0.8 top-p 0.95 top-k 40 min-p 0.05 · seed 7" in text
    assert "## System prompt\n\nBe brief." in text and "## You\n\nHow many gears?" in text
    assert "<details><summary>Thinking (6 tokens)</summary>\n\nLet me count.\n\n</details>" in text
    assert "Four **gears**.\n\n*42 tokens (6 thinking) · 75% accepted · 2.50 tok/pass · K=4 · 88.0 tok/s*" in text


def test_json_is_everything_stored_and_last_is_the_chat_changed_last(spectui_home: Path, tmp_path: Path,
                                                                     capsys) -> None:
    first, second = saved_chats(spectui_home)
    out = tmp_path / "chat.json"
    assert main(["export", "--last", "-o", str(out)]) == 0
    assert f"chat {second} exported to {out}" in capsys.readouterr().err
    document = json.loads(out.read_text())
    assert document["format"] == "spectui-chat" and document["chat"]["id"] == second
    assert main(["export", str(first), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["chat"]["settings"]["temperature"] == 0.8 and document["chat"]["models"]["pair"] == "tiny"
    reply = document["messages"][-1]
    assert (reply["role"], reply["reasoning"], reply["stats"], reply["complete"]) == \
        ("assistant", "Let me count.", FIGURES.stored(), True)
    assert ReplyFigures.from_stored(reply["stats"]) == FIGURES
    assert [m["role"] for m in document["messages"]] == ["system", "user", "assistant"]


def test_without_an_id_the_chats_are_listed(spectui_home: Path, capsys) -> None:
    first, second = saved_chats(spectui_home)
    assert main(["export"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split()[0] == str(second) and lines[0].endswith("Second chat")
    assert lines[1].split()[0] == str(first) and "3 messages" in lines[1]
    assert "spectui export ID" in captured.err


def test_a_store_of_an_older_version_is_exported_without_being_changed(spectui_home: Path, capsys) -> None:
    chats_db_path().parent.mkdir(parents=True)
    version_1_store(chats_db_path())
    before = chats_db_path().read_bytes()
    assert main(["export", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# old chat 1\n") and "chat 1 message 1" in text and "*3 tokens*" in text
    assert chats_db_path().read_bytes() == before  # not migrated: read-only (SQLite may add a -shm beside it)


@pytest.mark.parametrize(("argv", "expected"), [
    (["export", "99"], "no saved chat has id 99"),
    (["export", "1", "--last"], "give a chat id or --last, not both"),
    (["export", "0"], "export chat_id: must be a whole number from 1"),
])
def test_bad_requests_are_one_line(spectui_home: Path, capsys, argv: list[str], expected: str) -> None:
    saved_chats(spectui_home)
    with pytest.raises(SystemExit) if argv[1] == "0" else _nothing():
        code = main(argv)
        assert code == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_no_chats_and_an_unwritable_file_are_one_line(spectui_home: Path, tmp_path: Path, capsys) -> None:
    assert main(["export", "--last"]) == 1
    err = capsys.readouterr().err
    assert "no saved chats yet" in err and err.count("\n") == 1
    saved_chats(spectui_home)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["export", "--last", "-o", str(blocked / "chat.md")]) == 1
    err = capsys.readouterr().err
    assert "cannot write the export to" in err and "choose another file with -o" in err and err.count("\n") == 1
    if os.geteuid() != 0:  # root writes anywhere
        readonly = tmp_path / "ro"
        readonly.mkdir(mode=0o500)
        assert main(["export", "--last", "-o", str(readonly / "chat.md")]) == 1


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


# ----- a damaged store is reported as damaged, never as empty ----------------------------------


def damage_line(err: str) -> str:
    [line] = [line for line in err.splitlines() if "is damaged" in line]
    assert line.startswith("spectui: the chat store ") and "Traceback" not in err
    assert "`spectui export --repair` moves it aside and keeps what can be read in a fresh store" in line
    return line


@pytest.mark.parametrize("argv", [["export"], ["export", "--last"], ["export", "1"]])
def test_a_garbage_store_is_damaged_not_empty_and_left_as_it_was(spectui_home: Path, capsys, argv) -> None:
    path = chats_db_path()
    path.parent.mkdir(parents=True)
    garbage = os.urandom(5000)
    path.write_bytes(garbage)
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "no saved chats" not in captured.err
    line = damage_line(captured.err)
    assert "is damaged (file is not a database); no chat can be read from it" in line
    assert captured.err.count("\n") == 1
    assert path.read_bytes() == garbage


def test_a_store_with_a_damaged_page_lists_what_can_be_read_and_says_it_is_damaged(spectui_home: Path,
                                                                                     capsys) -> None:
    from chat_stores import make_store, overwrite_page, page_holding

    path = chats_db_path()
    path.parent.mkdir(parents=True)
    chats = make_store(path, n_chats=3, n_messages=30)
    overwrite_page(path, page_holding(path, b"chat 0 message 12 "))
    before = path.read_bytes()
    assert main(["export"]) == 1
    captured = capsys.readouterr()
    listed = [line.split()[0] for line in captured.out.splitlines()]
    assert listed == ["3", "2", "1"]
    line = damage_line(captured.err)
    assert "(database disk image is malformed)" in line
    assert "3 chats (" in line and "messages) can still be read from it (what is shown above)" in line
    assert main(["export", "3"]) == 1  # a chat the damage did not touch, whole, and the line again
    captured = capsys.readouterr()
    assert all(text in captured.out for text in chats[3])
    damage_line(captured.err)
    assert path.read_bytes() == before


def test_a_truncated_store_is_damaged_and_repair_keeps_what_export_read(spectui_home: Path, capsys) -> None:
    from chat_stores import damaged_copies, make_store

    path = chats_db_path()
    path.parent.mkdir(parents=True)
    make_store(path, n_chats=4, n_messages=30)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert main(["export"]) == 1
    listed = capsys.readouterr().out.splitlines()
    assert listed  # the chats in the first half
    assert main(["export", "--repair"]) == 0
    repaired = capsys.readouterr().err
    [aside] = damaged_copies(path.parent)
    assert f"it was moved to {aside}" in repaired and "recovered from it into a fresh chats.sqlite3" in repaired
    assert aside.read_bytes() == data[: len(data) // 2]  # kept as it was, never deleted
    assert main(["export"]) == 0  # a sound store now, holding what export could read before
    assert capsys.readouterr().out.splitlines() == listed
    assert main(["export", "--repair"]) == 0
    assert "is sound: nothing to repair" in capsys.readouterr().err
    assert damaged_copies(path.parent) == [aside]


def test_repair_runs_alone(spectui_home: Path, capsys) -> None:
    assert main(["export", "--repair", "--last"]) == 1
    assert "--repair takes no chat id, --last, --format or -o" in capsys.readouterr().err
    assert main(["export", "--repair"]) == 0
    assert "there is no chat store at" in capsys.readouterr().err
