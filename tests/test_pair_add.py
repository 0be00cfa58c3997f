"""`spectui pair add` keeps what it says and says what it does (issue #36).

- A replaced pair's download that the new pair reuses becomes the new pair's (no download is
  orphaned): the summary says `spectui rm NAME` deletes it, and it does.
- A draft head named as the target is refused; a draft model not smaller than its target is
  refused, and one larger than chat and bench accept quietly gets their warning.
- The summary names the Ollama tag the user gave, not another tag sharing its blob, terminal-safe.
- Another process holding the record's lock: one line saying so, then a bounded wait.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import tiny_bigram
import tiny_eagle3
from cli_output import one_error_line
from local_stores import Files, Layout, downloaded_pair, ollama_model, point_at, store_layout, write_files

from spectui import paths, safe_text
from spectui.catalog import record
from spectui.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return write_files(tmp_path_factory.mktemp("models"))


@pytest.fixture
def stores(files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Layout:
    layout = store_layout(tmp_path / "stores", files)
    point_at(layout, monkeypatch, spectui_home)
    return layout


def test_a_download_the_new_pair_reuses_is_named_as_what_rm_deletes(stores: Layout, tmp_path: Path,
                                                                      capsys) -> None:
    pulled = downloaded_pair(tmp_path / "hub", stores.files)
    record.add_pair("big", pulled)
    reused = pulled.target[0].path
    assert main(["pair", "add", "big", "--target", reused, "--draft", "ollama:someone/tinier:q8",
                 "--replace", "--delete-replaced"]) == 0
    out = capsys.readouterr().out
    assert "deletes no file" not in out
    assert f"(spectui rm big forgets it and deletes {reused}: downloaded for the pair it replaced" in out
    assert Path(reused).exists() and not Path(pulled.draft[0].path).exists()  # the unused one went now
    assert main(["rm", "big"]) == 0
    assert f"deleted {reused}" in capsys.readouterr().out and not Path(reused).exists()


def test_a_pair_of_files_it_does_not_own_still_says_rm_deletes_no_file(stores: Layout, capsys) -> None:
    assert main(["pair", "add", "mine", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8"]) == 0
    assert "(spectui rm mine forgets it and deletes no file)" in capsys.readouterr().out
    assert main(["rm", "mine"]) == 0
    assert stores.blob(stores.files.target).exists() and stores.blob(stores.files.draft).exists()


def test_a_draft_head_named_as_the_target_is_refused(stores: Layout, tmp_path: Path, capsys) -> None:
    target = tiny_bigram.llama_target(tmp_path / "bigram")
    head = tiny_eagle3.write_eagle3_head(tmp_path / "eagle3-llama.gguf", target)
    assert main(["pair", "add", "wrong", "--target", str(head), "--draft", str(target.path)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "pair wrong was not saved: eagle3-llama.gguf is an EAGLE-3 head, not a model to chat with" in line
    assert "wrong" not in record.read_record().pairs


def test_a_draft_not_smaller_than_its_target_is_refused_and_a_large_one_warned_about(stores: Layout,
                                                                                     capsys) -> None:
    files = stores.files
    assert main(["pair", "add", "swapped", "--target", str(files.draft), "--draft", str(files.target)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert ("pair swapped was not saved: the draft target.gguf (0.8 MB) is not smaller than the target "
            "draft.gguf") in line
    assert "were --target and --draft swapped?" in line and "swapped" not in record.read_record().pairs
    assert main(["pair", "add", "large", "--target", str(files.target), "--draft", str(files.draft2)]) == 0
    captured = capsys.readouterr()
    assert "saved pair large" in captured.out
    assert captured.err == ("warning: the draft tiny-2l.gguf is 59% of the target's size: drafting costs too much "
                            "to pay off; pick a draft at most about a third of the target\n")


def test_the_summary_names_the_tag_given_and_never_prints_another_tags_controls(stores: Layout,
                                                                                  capsys) -> None:
    hostile = "\x1b]0;owned\x07evil" + os.fsdecode(b"\x9b31m")  # sorts first; a byte that is not UTF-8
    ollama_model(stores.ollama, ("registry.ollama.ai", "library", hostile, "x"), stores.files.target)
    assert main(["pair", "add", "mine", "--target", "ollama:tiny:latest", "--draft",
                 "ollama:someone/tinier:q8"]) == 0
    out = capsys.readouterr().out
    assert "  target: tiny:latest (" in out and "  draft:  someone/tinier:q8 (" in out
    assert "evil" not in out and safe_text.is_safe(out, multiline=True)


def test_lone_surrogates_are_escaped_so_no_raw_byte_reaches_the_terminal() -> None:
    name = "model" + os.fsdecode(b"\x9b31m\xff")
    assert safe_text.line(name) == "model\\udc9b31m\\udcff"
    assert safe_text.line(name).encode("utf-8")  # printable in UTF-8, strict


# ----- the record's lock --------------------------------------------------------------------------


@pytest.fixture
def held_lock(stores: Layout, monkeypatch: pytest.MonkeyPatch):
    """The record's lock, held by "another process" (another open file: flock tells them apart)."""
    from filelock import FileLock

    path = paths.pulled_record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path) + ".lock", thread_local=False)  # released from spectui's thread below
    lock.acquire()
    monkeypatch.setattr(record, "LOCK_QUIET_WAIT", 0.05)
    try:
        yield lock
    finally:
        lock.release()


def run_bounded(argv: list[str]) -> int:
    """`main(argv)` on a thread, given up on after a minute (a wait without end fails the test)."""
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(main(argv)), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "pair add still waiting for the lock after a minute"
    return result[0]


PAIR_ADD = ["pair", "add", "mine", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8"]


def test_a_held_lock_is_said_and_waited_for(held_lock, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    said: list[str] = []
    say = record._say_waiting

    def say_then_release(line: str) -> None:  # the other process finishes once spectui said it waits
        said.append(line)
        say(line)
        held_lock.release()

    monkeypatch.setattr(record, "_say_waiting", say_then_release)
    assert run_bounded(PAIR_ADD) == 0
    captured = capsys.readouterr()
    assert "saved pair mine" in captured.out
    [line] = [line for line in captured.err.splitlines() if line.startswith("spectui: ")]
    assert line.startswith("spectui: waiting for another spectui (a pull, rm or pair add) to finish with ")
    assert "mine" in record.read_record().pairs


def test_a_lock_held_past_the_timeout_is_one_line_and_changes_nothing(held_lock, monkeypatch, capsys) -> None:
    monkeypatch.setattr(record, "LOCK_TIMEOUT", 0.3)
    assert run_bounded(PAIR_ADD) == 1
    err = capsys.readouterr().err
    waiting, error = [line for line in err.splitlines() if line.startswith("spectui: ")]
    assert waiting.startswith("spectui: waiting for another spectui")
    assert "another process has held" in error and "was not changed" in error and "Traceback" not in err
    assert not paths.pulled_record_path().exists()

