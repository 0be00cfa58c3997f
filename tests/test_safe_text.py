"""Text from outside reaches the terminal escaped: `spectui.safe_text` itself, the CLI's rows and
error lines (store folder names, GGUF metadata, paths, pair names and descriptions, chat titles),
and the app's title, status, toasts, notes, panel and palette (controls escaped, markup shown as
text). Also the Ollama title and the hint for a damaged Ollama blob.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import tiny_gguf
from cli_output import one_error_line
from hypothesis import given, settings
from hypothesis import strategies as st
from local_stores import Files, Layout, ollama_model, point_at, store_layout, write_files
from textual.widgets import Label, Static
from ui_harness import SIZE, RecordingApp, options, palette_text, ready, run_async, shown, until

from spectui import safe_text
from spectui.catalog import record
from spectui.cli import main
from spectui.engine.drafters.spec import DrafterSpec
from spectui.ui.chat_view import NoteMessage

HOSTILE = "evil\x1b]0;PWNED\x07\x1b[31mred\x9b2J\u202e"
"""Sets the terminal's title, turns it red, clears the screen through a C1 CSI, reverses the line."""
SHOWN = "evil\\x1b]0;PWNED\\x07\\x1b[31mred\\x9b2J\\u202e"
MARKUP = "[bold red]x[/bold red][/x]"
"""Rich/Textual markup: shown as these characters; `[/x]` alone would break the markup parser."""
FILE_MARKUP = "[bold red]x[$accent][B]"
"""Markup that fits in a file name (no `/`)."""
UNSAFE = {*map(chr, range(0x20)), *map(chr, range(0x7F, 0xA0)), "\u2028", "\u2029",
          *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}


def no_controls(text: str, keep: str = "") -> bool:
    return not any(char in UNSAFE and char not in keep for char in text)


# ----- the module ---------------------------------------------------------------------------------


def test_every_control_is_escaped_and_printable_text_is_kept() -> None:
    for code in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]:
        escaped = safe_text.line(chr(code))
        assert escaped.startswith("\\") and len(escaped) > 1 and no_controls(escaped), hex(code)
    assert safe_text.line(HOSTILE) == SHOWN
    assert safe_text.line("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert safe_text.block("a\nb\tc\rd\x1b") == "a\nb\tc\\rd\\x1b"
    kept = "Qwen2.5 · résumé · 中文 · 🙂 · [bold] · C:\\path · ~/models"
    assert safe_text.line(kept) == kept == safe_text.block(kept)
    assert safe_text.content(MARKUP).plain == MARKUP  # Content: never parsed as markup
    assert safe_text.line(Path("/x/\x1bq")) == "/x/\\x1bq"  # any object, as str() gives it


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(text=st.text())
def test_any_text_becomes_one_printable_line(text: str) -> None:
    line, block = safe_text.line(text), safe_text.block(text)
    assert no_controls(line) and no_controls(block, keep="\n\t")
    assert safe_text.line(line) == line and safe_text.is_safe(line)  # nothing left to escape
    assert block.count("\n") == text.count("\n")
    assert line == "".join(escaped(char) if char in UNSAFE else char for char in text)  # nothing else changes


def escaped(char: str) -> str:
    """The escape the module docstring promises for one control character."""
    named = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return named.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


# ----- the CLI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return write_files(tmp_path_factory.mktemp("models"))


@pytest.fixture
def hostile(files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Layout:
    """The stores, plus an Ollama model and an LM Studio folder named HOSTILE, and MARKUP."""
    layout = store_layout(tmp_path / "stores", files)
    ollama_model(layout.ollama, ("registry.ollama.ai", "library", HOSTILE, "latest"), files.draft)
    ollama_model(layout.ollama, ("registry.ollama.ai", "library", MARKUP.replace("/", "|"), "latest"), None)
    folder = layout.home / ".lmstudio" / "models" / "pub" / HOSTILE
    folder.mkdir(parents=True)
    shutil.copyfile(files.draft, folder / "m.gguf")
    point_at(layout, monkeypatch, spectui_home)
    return layout


def test_list_local_prints_store_names_escaped_and_json_keeps_them(hostile: Layout, capsys) -> None:
    assert main(["list", "--local"]) == 0
    out = capsys.readouterr().out
    assert no_controls(out, keep="\n")
    assert f"ollama:{SHOWN}:latest" in out and f"lmstudio:pub/{SHOWN}/m.gguf" in out
    assert main(["list", "--local", "--json"]) == 0
    raw = capsys.readouterr().out
    assert no_controls(raw, keep="\n")  # json.dumps escapes controls itself
    assert f"ollama:{HOSTILE}:latest" in {m["reference"] for m in json.loads(raw)["models"]}


def test_pair_add_and_list_print_hostile_references_escaped(hostile: Layout, capsys) -> None:
    assert main(["pair", "add", "evil", "--target", "ollama:tiny", "--draft", f"lmstudio:pub/{HOSTILE}/m.gguf"]) == 0
    out = capsys.readouterr().out
    assert no_controls(out, keep="\n") and f"pub/{SHOWN}/m.gguf" in out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert no_controls(out, keep="\n") and f"local pair: ollama:tiny + lmstudio:pub/{SHOWN}/m.gguf" in out


def test_a_hostile_file_name_in_an_error_is_one_escaped_line(files: Files, tmp_path: Path, spectui_home: Path,
                                                             capsys) -> None:
    bad = tmp_path / f"{HOSTILE}\nsecond line.gguf"
    shutil.copyfile(files.bos, bad)  # a tokenizer that differs: the pair is refused, naming the file
    assert main(["pair", "add", "bad", "--target", str(files.target), "--draft", str(bad)]) == 1
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert err == line + "\n" and no_controls(line)
    assert f"draft {SHOWN}\\nsecond line.gguf does not share the tokenizer" in line


def test_gguf_metadata_in_a_listing_is_escaped(tmp_path: Path, monkeypatch, spectui_home: Path, capsys) -> None:
    import gguf
    import numpy as np

    folder = tmp_path / "models"
    folder.mkdir()
    writer = gguf.GGUFWriter(str(folder / "odd.gguf"), HOSTILE)  # general.architecture
    writer.add_name(HOSTILE)
    writer.add_token_list(["a", "b"])
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    (spectui_home / "config").mkdir(parents=True)
    (spectui_home / "config" / "config.toml").write_text(f"local_model_dirs = [{json.dumps(str(folder))}]")
    assert main(["list", "--local"]) == 0
    out = capsys.readouterr().out
    assert no_controls(out, keep="\n") and SHOWN in out


def test_export_lists_titles_escaped_and_stdout_is_exact_unless_a_terminal(spectui_home: Path, monkeypatch,
                                                                          capsys) -> None:
    from spectui.chat.conversation import Conversation
    from spectui.chat.store import ChatStore
    from spectui.paths import chats_db_path
    from spectui.session.figures import ReplyFigures

    store = ChatStore(chats_db_path())
    chat = Conversation(store, "tiny")
    chat.add_user(f"title {HOSTILE}")
    chat.start_reply()
    chat.finish_reply(f"reply {HOSTILE}", ReplyFigures(reason="eos", tokens=1))
    store.close()
    assert main(["export"]) == 0
    out = capsys.readouterr().out
    assert f"title {SHOWN}" in out and no_controls(out, keep="\n")
    assert main(["export", "--last"]) == 0
    assert f"reply {HOSTILE}" in capsys.readouterr().out  # a pipe or a file gets the chat exactly

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["export", "--last"]) == 0
    assert f"reply {SHOWN}" in terminal.getvalue() and no_controls(terminal.getvalue(), keep="\n")


def test_a_truncated_ollama_blob_says_ollama_pull(files: Files, tmp_path: Path, monkeypatch,
                                                  spectui_home: Path, capsys) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(files.target.read_bytes()[: files.target.stat().st_size // 2])
    store = tmp_path / "ollama"
    ollama_model(store, ("registry.ollama.ai", "library", "cut", "3b"), cut)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    assert main(["bench", "--target", "ollama:cut:3b", "--drafter", "ngram", "--max-tokens", "4"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "is truncated" in line and "download it again: `ollama pull cut:3b`" in line and "spectui pull" not in line


def test_ollama_models_are_titled_by_their_ollama_name(hostile: Layout) -> None:
    from spectui.catalog.local import resolve_reference
    from spectui.session.options import models_label

    target, draft = resolve_reference("ollama:tiny:7b"), resolve_reference(f"ollama:{HOSTILE}")
    assert target.name.startswith("sha256-")
    assert models_label(target, draft) == f"tiny:7b + {SHOWN}:latest"  # listed first: tiny:7b, not :latest
    other = hostile.root / "plain" / "model.gguf"
    assert models_label(other, None) == "model.gguf"


# ----- the app ------------------------------------------------------------------------------------


def named_pair(tiny_pair: tiny_gguf.TinyPair, folder: Path, name: str) -> tuple[Path, Path]:
    """`tiny_pair` copied under hostile file names."""
    folder.mkdir(parents=True, exist_ok=True)
    target, draft = folder / f"{name}.gguf", folder / f"{name}-draft.gguf"
    shutil.copyfile(tiny_pair.target, target)
    shutil.copyfile(tiny_pair.draft, draft)
    return target, draft


def screen_text(app: RecordingApp) -> str:
    """Title, status, panel, notes and toasts, as shown."""
    parts = [str(app.screen.query_one("HeaderTitle").render()), str(app.query_one("#status", Label).content),
             *(shown(w) for w in app.query(Static) if w.id in ("figures", "panel-notes", "settings-line")),
             *(shown(n) for n in app.query(NoteMessage)), *(str(n.message) for n in app._notifications)]
    return "\n".join(parts)


@run_async
async def test_the_app_shows_hostile_names_as_text(tiny_pair, tmp_path: Path, spectui_home: Path) -> None:
    name = f"{FILE_MARKUP}{HOSTILE}"
    target, draft = named_pair(tiny_pair, tmp_path, name)
    app = RecordingApp(options(tiny_pair, target=target, drafter=DrafterSpec(draft=draft)))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        text = screen_text(app)
        assert f"{FILE_MARKUP}{SHOWN}.gguf + {FILE_MARKUP}{SHOWN}-draft.gguf" in app.sub_title
        assert f"ready · {FILE_MARKUP}{SHOWN}.gguf" in text and no_controls(text, keep="\n")
        assert f"draft model {FILE_MARKUP}{SHOWN}-draft.gguf" in shown(app.query_one("#figures", Static))
        app.notify(f"toast {MARKUP}{HOSTILE}")
        await pilot.pause()
        toast = list(app._notifications)[-1]
        assert toast.message == f"toast {MARKUP}{SHOWN}" and not toast.markup
        await app.note(f"note {MARKUP}{HOSTILE}")
        assert f"note {MARKUP}{SHOWN}" in shown(list(app.query(NoteMessage))[-1])


@run_async
async def test_a_load_error_quoting_a_hostile_path_is_shown_as_text(tiny_pair, tmp_path: Path,
                                                                   spectui_home: Path) -> None:
    missing = tmp_path / f"{FILE_MARKUP}{HOSTILE}.gguf"
    app = RecordingApp(options(tiny_pair, target=missing))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.pair.load_failed, "the failed load")
        error = shown(app.query_one(".note-message.error", NoteMessage))
        assert f"model file not found: {tmp_path}/{FILE_MARKUP}{SHOWN}.gguf" in " ".join(error.split())
        assert any(f"{FILE_MARKUP}{SHOWN}" in str(n.message) and not n.markup for n in app._notifications)
        assert no_controls(screen_text(app), keep="\n")


@run_async
async def test_a_chat_template_error_is_shown_as_text(tmp_path: Path, spectui_home: Path) -> None:
    template = f"{{{{ raise_exception('{MARKUP} {HOSTILE}') }}}}"
    pair = tiny_gguf.write_pair(tmp_path / "models", spec=tiny_gguf.TinySpec(chat_template=template))
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.pair.ready or app.pair.load_failed, "the load")
        app.prompt.load_text("Hello")
        await pilot.press("enter")
        await until(pilot, lambda: any(MARKUP in str(n.message) for n in app._notifications), "the error toast")
        text = screen_text(app)
        assert f"{MARKUP} {SHOWN}" in " ".join(text.split()) and no_controls(text, keep="\n")


@run_async
async def test_the_palette_lists_hostile_local_models_as_text(hostile: Layout, tiny_pair) -> None:
    app = RecordingApp(options(tiny_pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"local ollama")
        await until(pilot, lambda: "local ollama:" in palette_text(app), "the local models in the palette")
        listed = palette_text(app)
        assert f"ollama:{SHOWN}:latest" in listed and no_controls(listed, keep="\n")
        await pilot.press("escape")


def test_a_pulled_pair_with_a_hostile_name_lists_escaped(spectui_home: Path, tiny_pair, capsys) -> None:
    files = [record.PulledFile(path=str(path), size=1) for path in (tiny_pair.target, tiny_pair.draft)]
    record.add_pair(HOSTILE, record.PulledPair(target=files[:1], draft=files[1:], description=MARKUP + HOSTILE,
                                               adhoc=True))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert no_controls(out, keep="\n") and SHOWN in out and f"{MARKUP}{SHOWN}" in out


@run_async
async def test_a_settings_error_quoting_what_was_typed_is_text(tiny_pair, spectui_home: Path) -> None:
    from textual.widgets import Input

    from spectui.ui.settings_screen import SettingsScreen

    app = RecordingApp(options(tiny_pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings screen")
        app.screen.query_one("#temperature", Input).value = f"{MARKUP}\x1b"
        await pilot.press("ctrl+s")
        error = str(app.screen.query_one("#settings-error", Label).content)
        assert error == f"temperature: must be a number from 0 (greedy) to 100, not '{MARKUP}\\x1b'"
