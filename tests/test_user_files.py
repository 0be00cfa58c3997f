"""The user's files are never overwritten silently, and no download is orphaned: F10 picks a free
name and says which, `export -o` refuses an existing file without `--force`, `pair add` refuses
an existing name without `--replace` and the same file as target and draft, and a replaced or
removed pair's downloads stay removable by `spectui rm`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chat_stores import saved_chats
from cli_output import one_error_line
from local_stores import Files, Layout, downloaded_pair, point_at, store_layout, write_files
from ui_harness import SIZE, RecordingApp, notes, options, ready, run_async, send, toasts, until

from spectui.catalog import record
from spectui.catalog.resolve import remove_pair, resolve_pair
from spectui.cli import main
from spectui.user_files import create_new, write_unused_name

# ----- writing new files ----------------------------------------------------------------------------


def test_create_new_never_replaces_a_file_or_a_link(tmp_path: Path) -> None:
    mine = tmp_path / "mine.md"
    mine.write_text("mine")
    with pytest.raises(FileExistsError):
        create_new(mine, "other")
    dangling = tmp_path / "link.md"
    dangling.symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(FileExistsError):
        create_new(dangling, "other")
    assert mine.read_text() == "mine" and not (tmp_path / "elsewhere.md").exists()
    assert write_unused_name(tmp_path, "mine", ".md", "new") == tmp_path / "mine-2.md"
    assert write_unused_name(tmp_path, "mine", ".md", "newer") == tmp_path / "mine-3.md"
    assert (mine.read_text(), (tmp_path / "mine-2.md").read_text()) == ("mine", "new")


def test_export_o_refuses_an_existing_file_unless_forced(spectui_home: Path, tmp_path: Path, capsys) -> None:
    saved_chats(spectui_home)
    mine = tmp_path / "notes.md"
    mine.write_text("my own notes")
    assert main(["export", "--last", "-o", str(mine)]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{mine} already exists; add --force to overwrite it" in line
    assert mine.read_text() == "my own notes"
    assert main(["export", "--last", "-o", str(mine), "--force"]) == 0
    assert "exported to" in capsys.readouterr().err and mine.read_text().startswith("# Second chat")


@run_async
async def test_f10_never_overwrites_and_says_which_name_it_took(tiny_pair, spectui_home: Path,
                                                                tmp_path: Path) -> None:
    app = RecordingApp(options(tiny_pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.chat.export_dir = tmp_path
        await send(pilot, "Export me")
        usual = tmp_path / f"spectui-chat-{app.chat.conversation.chat_id}.md"
        usual.write_text("an older chat's export, same id from another store")
        await pilot.press("f10")
        second = tmp_path / f"spectui-chat-{app.chat.conversation.chat_id}-2.md"
        await until(pilot, second.exists, "the export under a free name")
        assert usual.read_text() == "an older chat's export, same id from another store"
        assert "## You\n\nExport me" in second.read_text()
        said = f"chat exported to {second} ({usual.name} already exists and was kept)"
        assert said in toasts(app) and said in notes(app)
        await pilot.press("f10")
        await until(pilot, (tmp_path / f"spectui-chat-{app.chat.conversation.chat_id}-3.md").exists, "a third export")


# ----- pair add -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return write_files(tmp_path_factory.mktemp("models"))


@pytest.fixture
def stores(files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Layout:
    layout = store_layout(tmp_path / "stores", files)
    point_at(layout, monkeypatch, spectui_home)
    return layout


def test_pair_add_refuses_an_existing_name_without_replace(stores: Layout, capsys) -> None:
    assert main(["pair", "add", "mine", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8"]) == 0
    capsys.readouterr()
    hf = "hf:owner/tiny-GGUF:tiny-draft-q.gguf"
    assert main(["pair", "add", "mine", "--target", "ollama:tiny", "--draft", hf]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "pair mine already exists" in line and "--replace" in line
    assert resolve_pair("mine").draft == stores.blob(stores.files.draft)  # unchanged
    assert main(["pair", "add", "mine", "--target", "ollama:tiny", "--draft", hf, "--replace"]) == 0
    out = capsys.readouterr().out
    assert "replaced pair mine; it held no download that only it used" in out
    assert resolve_pair("mine").draft.name == "tiny-draft-q.gguf"
    assert main(["pair", "add", "x", "--target", "ollama:tiny", "--draft", hf, "--delete-replaced"]) == 1
    assert "--delete-replaced goes with --replace" in one_error_line(capsys.readouterr().err)


def test_replacing_a_pulled_pair_keeps_its_downloads_removable(stores: Layout, tmp_path: Path, capsys) -> None:
    pulled = downloaded_pair(tmp_path / "hub", stores.files)
    record.add_pair("big", pulled)
    assert main(["pair", "add", "big", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8",
                 "--replace"]) == 0
    out = capsys.readouterr().out
    assert "its 2 downloaded file(s) (0.0 GB) are kept as pair big-old: `spectui rm big-old` deletes them" in out
    kept = resolve_pair("big-old")  # still usable, listed, and removable
    assert kept.target == Path(pulled.target[0].path)
    assert main(["list"]) == 0 and "big-old" in capsys.readouterr().out
    assert main(["rm", "big-old"]) == 0
    assert "deleted" in capsys.readouterr().out
    assert not kept.target.exists() and not kept.draft.exists()
    assert stores.blob(stores.files.target).exists()  # the new pair's (Ollama's) files untouched


def test_replace_with_delete_replaced_deletes_the_old_downloads_now(stores: Layout, tmp_path: Path,
                                                                    capsys) -> None:
    pulled = downloaded_pair(tmp_path / "hub", stores.files)
    record.add_pair("big", pulled)
    assert main(["pair", "add", "big", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8",
                 "--replace", "--delete-replaced"]) == 0
    out = capsys.readouterr().out
    assert "replaced pair big; deleted its downloads no other pair uses:" in out
    assert all(not Path(f.path).exists() for f in pulled.files())
    assert set(record.read_record().pairs) == {"big"}


def test_a_download_the_new_pair_still_uses_stays_owned_and_is_deleted_by_the_last_rm(
    stores: Layout, tmp_path: Path, capsys
) -> None:
    pulled = downloaded_pair(tmp_path / "hub", stores.files)
    record.add_pair("big", pulled)
    own_draft = pulled.draft[0].path
    assert main(["pair", "add", "big", "--target", "ollama:tiny", "--draft", own_draft, "--replace"]) == 0
    out = capsys.readouterr().out
    assert "kept as pair big-old" in out and "1 downloaded file(s)" in out  # only the target left unused
    assert resolve_pair("big").draft == Path(own_draft)
    assert main(["rm", "big-old"]) == 0
    assert Path(own_draft).exists()  # the new pair uses it
    assert main(["rm", "big"]) == 0
    assert f"deleted {own_draft}" in capsys.readouterr().out and not Path(own_draft).exists()


def test_removing_a_pair_hands_its_downloads_to_the_pairs_still_using_them(stores: Layout, tmp_path: Path) -> None:
    pulled = downloaded_pair(tmp_path / "hub", stores.files)
    record.add_pair("first", pulled)
    shared = pulled.draft[0].path
    local = record.PulledPair(target=[record.PulledFile(path=str(stores.blob(stores.files.target)), size=1)],
                              draft=[record.PulledFile(path=shared, size=1)], adhoc=True)
    record.add_pair("second", local)
    assert Path(shared) not in remove_pair("first")
    assert record.read_record().pairs["second"].draft[0].owned
    assert remove_pair("second") == [Path(shared)] and not Path(shared).exists()
    assert stores.blob(stores.files.target).exists()  # never spectui's: never deleted


def test_a_pull_over_a_pair_keeps_the_downloads_it_no_longer_uses(stores: Layout, tmp_path: Path) -> None:
    from spectui.catalog.pull import _check_and_record

    record.add_pair("p", downloaded_pair(tmp_path / "old", stores.files))
    said: list[str] = []
    _check_and_record("p", downloaded_pair(tmp_path / "new", stores.files), log=said.append)
    assert any("kept as pair p-old" in line for line in said)
    assert Path(resolve_pair("p-old").target).parent == tmp_path / "old"
    record.add_pair("p", downloaded_pair(tmp_path / "new", stores.files))  # the same files again
    assert "p-old-2" not in record.read_record().pairs


@pytest.mark.parametrize("draft", ["same path", "another reference", "a symlink", "a hard link"])
def test_pair_add_refuses_the_target_as_its_own_draft(stores: Layout, tmp_path: Path, draft: str, capsys) -> None:
    blob = stores.blob(stores.files.target)
    if draft == "same path":
        ref = str(blob)
    elif draft == "another reference":
        ref = "ollama:tiny:latest"  # the same blob as ollama:tiny:7b
    elif draft == "a symlink":
        (tmp_path / "link.gguf").symlink_to(blob)
        ref = str(tmp_path / "link.gguf")
    else:
        os.link(blob, tmp_path / "hard.gguf")
        ref = str(tmp_path / "hard.gguf")
    assert main(["pair", "add", "self", "--target", "ollama:tiny:7b", "--draft", ref]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "pair self was not saved: the target and the draft are the same file" in line
    assert "self" not in record.read_record().pairs
