"""The everyday chat (#14) driven through Pilot on tiny real models: the message box, edit,
regenerate, copy, export, settings, queued messages, resume with the recorded models and mode.
Reasoning replies are in `test_ui_reasoning.py`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tiny_gguf
from chat_stores import saved
from textual import events
from textual.widgets import Input, Label, Select, Static, TextArea
from ui_harness import (
    DEADLINE,
    SIZE,
    ConfigApp,
    RecordingApp,
    notes,
    options,
    ready,
    run_async,
    send,
    shown,
    toasts,
    until,
)

from spectui.chat.chat_settings import ChatSettings
from spectui.chat.store import ChatStore
from spectui.engine.generation_config import SamplingConfig
from spectui.paths import chats_db_path
from spectui.ui.chat_view import AssistantMessage, UserMessage
from spectui.ui.engine_host import EngineHost
from spectui.ui.settings_screen import SettingsScreen


class SlowLoadHost(EngineHost):
    """Holds the load (in its worker thread) until `loaded.set()`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loaded = threading.Event()

    def _load_locked(self, *args: Any) -> None:
        self.loaded.wait(DEADLINE)
        super()._load_locked(*args)


class SlowLoadApp(RecordingApp):
    """Holds the load (in its engine host's worker thread) until `loaded.set()`."""

    engine_class = SlowLoadHost

    @property
    def loaded(self) -> threading.Event:
        return self.engine.loaded  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return tiny_pair


def status(app: RecordingApp) -> str:
    return str(app.query_one("#status", Label).content)


# ----- the message box ---------------------------------------------------------------------------


@run_async
async def test_enter_sends_while_ctrl_j_and_shift_enter_start_new_lines(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("a", "ctrl+j", "b", "shift+enter", "c")
        assert app.prompt.text == "a\nb\nc" and not app.finishes
        await pilot.press("enter")
        await until(pilot, lambda: app.finishes and app.replies.busy is None, "the reply")
        assert app.query_one(UserMessage).text == "a\nb\nc" and app.prompt.text == ""
    assert saved()[0] == ("user", "a\nb\nc")


@run_async
async def test_a_200_line_paste_stays_one_message_and_the_app_keeps_answering_keys(pair) -> None:
    pasted = "\n".join(f"line {i}: gear_ratio(front={i}, back={i % 7 + 1})" for i in range(200))
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        started = time.monotonic()
        app.post_message(events.Paste(pasted))  # as a terminal delivers a bracketed paste
        await until(pilot, lambda: app.prompt.text == pasted, "the paste in the message box")
        await pilot.press("f6")
        assert app.chat.colouring  # a key right after the paste is handled
        assert time.monotonic() - started < 10  # generous: a shared machine
        await pilot.press("f6", "enter")
        await until(pilot, lambda: app.finishes and app.replies.busy is None, "the reply")
        [user] = app.query(UserMessage)
        assert user.text == pasted and len(app.chat.conversation.messages) == 2
    assert saved()[0] == ("user", pasted)


# ----- edit, regenerate, copy, export --------------------------------------------------------------


@run_async
async def test_up_edits_the_last_message_and_enter_resends_it_in_place_of_the_old_turn(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "first question")
        await send(pilot, "second question")
        await pilot.press("up")
        assert app.prompt.text == "second question" and app.replies.editing == 2
        assert app.query(UserMessage).last().has_class("-editing")
        assert "editing your last message" in status(app)
        app.prompt.load_text("second question, edited")
        await pilot.press("enter")
        await until(pilot, lambda: len(app.finishes) == 3 and app.replies.busy is None, "the new reply")
        users = [u.text for u in app.query(UserMessage)]
        assert users == ["first question", "second question, edited"] and len(app.query(AssistantMessage)) == 2
        contents = [m.content for m in app.chat.conversation.messages]
        assert contents[::2] == users and contents[3] == app.query(AssistantMessage).last().text
    assert [content for role, content in saved() if role == "user"] == users
    assert len(saved()) == 4


@run_async
async def test_escape_cancels_an_edit_and_nothing_changes(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "only question")
        await pilot.press("up", "escape")
        assert app.replies.editing is None and app.prompt.text == ""
        assert not app.query_one(UserMessage).has_class("-editing") and "ready ·" in status(app)
        assert len(app.chat.conversation.messages) == 2


@run_async
async def test_ctrl_r_regenerates_the_last_reply_with_the_current_k(pair) -> None:
    app = RecordingApp(options(pair, k=2, max_tokens=32))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Tell me about chains.")
        first_cycles = sum(len(u.cycles) for u in app.updates)
        await pilot.press("f3", "ctrl+r")
        await until(pilot, lambda: len(app.finishes) == 2 and app.replies.busy is None, "the new reply")
        cycles = [c for u in app.updates for c in u.cycles]
        before = [c.k for c in cycles[:first_cycles] if not c.probe]  # a baseline probe runs at K=0
        after = [c.k for c in cycles[first_cycles:] if not c.probe]
        assert max(before) == 2  # (the last cycles of a reply may be allowed fewer)
        assert after[0] == 3 and max(after) == 3
        assert len(app.chat.conversation.messages) == 2 and len(app.query(AssistantMessage)) == 1
        reply = app.query_one(AssistantMessage).text
    assert saved() == [("user", "Tell me about chains."), ("assistant", reply)]


@run_async
async def test_f9_copies_the_focused_reply_else_the_last_one(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "One")
        await send(pilot, "Two")
        first, last = app.query(AssistantMessage)
        await pilot.press("f9")
        assert app.clipboard == last.text.strip("\n") != ""
        first.focus()
        await pilot.press("f9")
        assert app.clipboard == first.text.strip("\n")
        assert "reply copied to the clipboard" in toasts(app)
        await pilot.press("o", "k")  # typing goes on in the message box
        assert app.focused is app.prompt and app.prompt.text == "ok"


@run_async
async def test_f10_exports_the_chat_and_the_palette_exports_json(pair, tmp_path: Path) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.chat.export_dir = tmp_path
        await pilot.press("f10")
        assert "nothing to export yet" in toasts(app)
        await send(pilot, "Export me")
        await pilot.press("f10")
        markdown = tmp_path / f"spectui-chat-{app.chat.conversation.chat_id}.md"
        await until(pilot, markdown.exists, "the export")
        text = markdown.read_text()
        assert "## You\n\nExport me" in text and "accepted" in text and "tok/pass" in text
        assert f"chat exported to {markdown}" in notes(app)
        await pilot.press("ctrl+p")
        await pilot.press(*"export chat as JSON")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, markdown.with_suffix(".json").exists, "the JSON export")


# ----- settings ------------------------------------------------------------------------------------


@run_async
async def test_ctrl_s_settings_are_checked_saved_with_the_chat_shown_and_applied(pair) -> None:
    app = ConfigApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings screen")
        screen = app.screen
        screen.query_one("#temperature", Input).value = "hot"
        await pilot.press("ctrl+s")
        error = str(screen.query_one("#settings-error", Label).content)
        assert error == "temperature: must be a number from 0 (greedy) to 100, not 'hot'"
        assert app.screen is screen and app.focused is screen.query_one("#temperature", Input)
        values = {"temperature": "0.7", "top_p": "0.9", "top_k": "20", "min_p": "0.1", "max_tokens": "12",
                  "seed": "7"}
        for key, value in values.items():
            screen.query_one(f"#{key}", Input).value = value
        screen.query_one("#system", TextArea).load_text("Answer briefly.")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, SettingsScreen), "the screen to close")
        expected = ChatSettings(temperature=0.7, top_p=0.9, top_k=20, min_p=0.1, max_tokens=12, seed=7)
        assert app.chat.conversation.settings == expected
        line = shown(app.query_one("#settings-line", Static))
        assert line == "T=0.7 top-p 0.9 top-k 20 min-p 0.1 · seed 7 · max 12 tok"
        await send(pilot, "Hi")
        request = app.requests[-1]
        assert request.sampling == SamplingConfig(temperature=0.7, top_k=20, top_p=0.9, min_p=0.1, seed=7)
        assert request.max_tokens == 12 and app.finishes[-1].finished.stats.generated_tokens <= 12
        chat = app.chat.conversation.chat_id
    store = ChatStore(chats_db_path())
    info = store.chat_info(chat)
    assert info is not None and ChatSettings.from_stored(info.settings) == expected
    assert saved(chat)[0] == ("system", "Answer briefly.")


@run_async
async def test_escape_leaves_the_settings_as_they_were(pair) -> None:
    app = RecordingApp(options(pair, temperature=0.4))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings screen")
        app.screen.query_one("#temperature", Input).value = "1.5"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, SettingsScreen), "the screen to close")
        assert app.chat.conversation.settings.temperature == 0.4
        assert shown(app.query_one("#settings-line", Static)).startswith("T=0.4 ")


# ----- loading, resuming ------------------------------------------------------------------------------


@run_async
async def test_a_message_typed_while_the_models_load_is_queued_and_sent_when_ready(pair) -> None:
    app = SlowLoadApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        app.prompt.load_text("Early bird")
        await pilot.press("enter")
        assert app.replies.queued is not None and app.prompt.text == "" and not app.chat.conversation.messages
        assert "1 message queued (Escape cancels)" in status(app)
        assert "queued" in app.query_one(UserMessage).border_title
        app.loaded.set()
        await until(pilot, lambda: app.finishes and app.replies.busy is None, "the queued message's reply")
        [user] = app.query(UserMessage)
        assert user.text == "Early bird" and user.border_title == "you" and app.replies.queued is None
        assert "queued" not in status(app)
    assert saved()[0] == ("user", "Early bird")


@run_async
async def test_escape_cancels_the_queued_message_and_gives_its_text_back(pair) -> None:
    app = SlowLoadApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        app.prompt.load_text("Never mind")
        await pilot.press("enter", "escape")
        assert app.replies.queued is None and not app.query(UserMessage) and app.prompt.text == "Never mind"
        assert "queued" not in status(app)
        app.loaded.set()
        await ready(pilot)
        await pilot.pause(0.3)
        assert not app.finishes and not app.chat.conversation.messages


@run_async
async def test_resume_reopens_the_chat_with_its_recorded_models_and_says_when_they_are_gone(
        pair, tmp_path: Path) -> None:
    other = tiny_gguf.write_pair(tmp_path / "other", seed=99)
    first = RecordingApp(options(other, pair_name="custom"))
    async with first.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Hello from the other models")
    second = RecordingApp(options(pair, resume=True, models_named=False))
    async with second.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert second.pair.options.target == other.target and second.pair.options.drafter.draft == other.draft
        assert "resumed with the models this chat was recorded with" in notes(second)
        assert second.pair.session.generator is not None
        await send(pilot, "Still the other models?")
    other.target.rename(tmp_path / "moved.gguf")
    third = RecordingApp(options(pair, resume=True, models_named=False))
    async with third.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert third.pair.options.target == pair.target
        warning = notes(third, "warning")
        assert "this chat was recorded with target.gguf + draft.gguf, which is not available now" in warning
        assert f"{other.target} is not there any more" in warning and "it continues with" in warning
        assert [u.text for u in third.query(UserMessage)] == ["Hello from the other models", "Still the other models?"]


@run_async
async def test_the_mode_is_saved_with_the_chat_and_comes_back_on_resume(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.chat.mode == "chat"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings screen")
        app.screen.query_one("#mode", Select).value = "completion"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, SettingsScreen), "the screen to close")
        assert app.chat.mode == "completion" and app.sub_title.startswith("completion ·")
        await send(pilot, "Once upon a time")
        assert app.query_one(AssistantMessage).border_title == "continuation"
        chat = app.chat.conversation.chat_id
        await pilot.press("ctrl+n")
        await until(pilot, lambda: app.chat.mode == "chat", "a new chat in the model's own mode")
    info = ChatStore(chats_db_path()).chat_info(chat)
    assert info is not None and info.mode == "completion"
    resumed = RecordingApp(options(pair, resume=True))
    async with resumed.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await until(pilot, lambda: resumed.chat.mode == "completion", "the saved mode")
        assert resumed.sub_title.startswith("completion ·")
    forced = RecordingApp(options(pair, resume=True, mode="chat", mode_named=True))
    async with forced.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert forced.chat.mode == "chat"  # --mode wins over the saved one


@run_async
async def test_every_chat_action_is_in_the_command_palette(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
        await pilot.press("ctrl+p")
        await pilot.press(*"regenerate reply")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: len(app.finishes) == 2 and app.replies.busy is None, "the regenerated reply")
        assert len(app.chat.conversation.messages) == 2


def test_resume_names_the_recorded_models_before_anything_is_resolved(pair, tmp_path: Path) -> None:
    from spectui.cli import build_parser
    from spectui.ui.run import with_recorded_models

    args = build_parser().parse_args(["chat", "--resume"])
    assert with_recorded_models(args) == (args, None)  # no store yet
    store = ChatStore(chats_db_path())
    chat = store.new_chat("custom")
    store.update_chat(chat, models={"pair": "custom", "target": str(pair.target), "draft": str(pair.draft),
                                    "drafter": "model"})
    named, notice = with_recorded_models(args)
    assert (named.target, named.draft, named.drafter) == (str(pair.target), str(pair.draft), "model")
    assert notice == "resumed with the models this chat was recorded with (target.gguf)"
    store.update_chat(chat, models={"pair": "custom", "target": str(tmp_path / "gone.gguf")})
    assert with_recorded_models(args) == (args, None)  # gone: the app says so, with the default pair
