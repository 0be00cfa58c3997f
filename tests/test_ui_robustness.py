"""The app on the tiny real models when things go wrong: a damaged or unwritable chat store, a
failed load, a bug in a handler or a worker. Plus the small display fixes (blank lines, plurals,
advice) checked without a screen."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import tiny_gguf
from chat_stores import damaged_copies, make_store, overwrite_page, page_holding
from textual.app import App, ComposeResult
from textual.widgets import Markdown, Static
from ui_harness import (
    DEADLINE,
    SIZE,
    RecordingApp,
    figures_text,
    options,
    ready,
    run_async,
    send,
    shown,
    until,
)

from spectui.chat.store import ChatStore
from spectui.engine.events import GenerationStats
from spectui.engine.model.llama_model import LlamaModel
from spectui.paths import chats_db_path
from spectui.session.figures import ReplyFigures, meta_line
from spectui.session.pair_load import same_model
from spectui.session.reply import ReplyPiece
from spectui.ui.chat_view import AssistantMessage, ChatLog, NoteMessage
from spectui.ui.engine_host import EngineHost
from spectui.ui.run import report_exit
from spectui.ui.stats_panel import low_acceptance_advice


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return tiny_pair


def notes(app: RecordingApp, kind: str = "") -> list[str]:
    return [shown(n) for n in app.query(NoteMessage) if not kind or n.has_class(kind)]


def toasts(app: RecordingApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


@run_async
async def test_a_damaged_store_is_moved_aside_and_the_last_readable_chat_resumes(pair, spectui_home) -> None:
    path = chats_db_path()
    path.parent.mkdir(parents=True)
    chats = make_store(path, n_chats=3, n_messages=30)
    overwrite_page(path, page_holding(path, b"chat 0 message 12 "))
    app = RecordingApp(options(pair, resume=True))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        [warning] = [n for n in notes(app, "warning") if "chat store" in n]
        assert "the chat store was damaged" in warning and "moved to" in warning
        assert any("the chat store was damaged" in t for t in toasts(app))
        resumed = [m.text for m in app.query(AssistantMessage)]
        assert resumed == chats[3][1::2]  # the last chat, whole (the damage was in the first)
        await send(pilot, "Still saving?")
    [aside] = damaged_copies(path.parent)
    assert str(aside) in warning
    saved = ChatStore(path)
    assert saved.last_chat_id() == 3  # the resumed chat went on in the fresh store
    contents = [m.content for m in saved.messages(3)]
    assert contents[:-2] == chats[3] and contents[-2] == "Still saving?"


@run_async
async def test_a_garbage_store_does_not_stop_the_app(pair, spectui_home) -> None:
    path = chats_db_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00garbage" * 500)
    app = RecordingApp(options(pair, resume=True))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        joined = " ".join(notes(app))
        assert "file is not a database" in joined and "no saved chat to resume" in joined
        await send(pilot, "Hello")
    assert [c.title for c in ChatStore(path).list_chats()] == ["Hello"]


@run_async
async def test_an_unwritable_home_runs_the_chat_unsaved_and_says_so(
    tiny_pair: tiny_gguf.TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.write_text("a file where the directory should be")
    monkeypatch.setenv("SPECTUI_HOME", str(home))
    app = RecordingApp(options(tiny_pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        [warning] = [n for n in notes(app, "warning") if "unsaved" in n]
        assert "this chat runs unsaved" in warning and "SPECTUI_HOME=/some/dir" in warning
        assert str(home / "data") in warning
        assert app.sub_title.endswith("· chats not saved")
        await send(pilot, "Hello")
        assert app.finishes[-1].finished.text
        assert app.chat.store.list_chats()[0].n_messages == 2  # kept in memory for this session
    assert home.read_text() == "a file where the directory should be"
    assert report_exit(app) == 0


@run_async
async def test_a_reply_that_cannot_be_saved_is_said_and_saved_later(pair, spectui_home) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "First, while there is room.")
        db = app.chat.store._store._db
        db.execute("PRAGMA query_only = 1")  # every write now fails, as on a file made read-only
        await send(pilot, "A long question " * 20)
        await pilot.pause()
        [error] = [n for n in notes(app, "error") if "could not save" in n]
        assert "readonly database" in error and "saved again with the next message" in error
        assert any("could not save" in t for t in toasts(app))
        assert app.query(AssistantMessage)[-1].text  # the reply is on screen all the same
        db.execute("PRAGMA query_only = 0")
        await send(pilot, "And now?")
        await pilot.pause()
        assert any("saved again" in n for n in notes(app))
    saved = ChatStore(chats_db_path())
    [chat] = saved.list_chats()
    assert [m.role for m in saved.messages(chat.id)] == ["user", "assistant"] * 3
    assert saved.messages(chat.id)[2].content == ("A long question " * 20).strip()


@run_async
async def test_after_a_failed_load_nothing_says_loading_or_measuring(pair, tmp_path: Path) -> None:
    app = RecordingApp(options(pair, target=tmp_path / "nowhere.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.pair.load_failed, "the failed load")
        await pilot.pause()
        assert "measuring" not in figures_text(app)
        assert "measuring" not in shown(app.query_one("#baseline-note", Static))
        assert "your next message loads it again, or pick a pair with ctrl+p" in shown(app.query_one("#status"))
        failures = len(notes(app, "error"))
        await send(pilot, "Hello?", wait=False)  # loads again (the file may be back): still missing
        await until(pilot, lambda: len(notes(app, "error")) > failures and app.pair.load_failed, "the second failure")
        assert "nowhere.gguf" in notes(app, "error")[-1]
        assert app.prompt.text == "Hello?"  # given back, to send once the file is there
        assert not any("still loading" in t for t in toasts(app))
        app.engine.start_loading(options(pair))
        assert "measuring" in figures_text(app)
        await ready(pilot)
        assert "measuring" not in figures_text(app)


class BuggyHost(EngineHost):
    """A real engine host with a bug planted in one worker step (the first load: `BuggyApp.loads`)."""

    def _memory_plan(self, options):
        BuggyApp.loads += 1
        if BuggyApp.loads == 1:
            raise KeyError("planted bug in a worker")
        return super()._memory_plan(options)


class BuggyApp(RecordingApp):
    """A real app with a bug planted in one handler (F9) and one worker step (the first load)."""

    loads = 0
    engine_class = BuggyHost

    def on_key(self, event) -> None:
        if event.key == "f9":
            raise ZeroDivisionError("planted bug in a handler")


@run_async
async def test_a_bug_in_a_worker_is_one_line_with_a_log_and_the_app_stays_usable(pair, spectui_home) -> None:
    BuggyApp.loads = 0
    app = BuggyApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.pair.load_failed, "the failed load")
        [error] = notes(app, "error")
        assert "unexpected error while loading the models (KeyError: 'planted bug in a worker')" in error
        [log] = (spectui_home / "logs").iterdir()
        assert str(log) in error and "planted bug in a worker" in log.read_text()
        app.engine.start_loading(options(pair))
        await ready(pilot)
        await send(pilot, "Hello")
    assert app.quit_state.crash_line is None and not app.return_code


@run_async
async def test_a_bug_in_a_handler_ends_the_app_with_one_line_a_log_and_exit_code_1(
    pair, spectui_home, capsys
) -> None:
    BuggyApp.loads = 1
    app = BuggyApp(options(pair))
    with pytest.raises(ZeroDivisionError):
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await pilot.press("f9")
            await asyncio.wait_for(app._exception_event.wait(), DEADLINE)
    assert app.return_code == 1
    assert app._exit_renderables == []  # no traceback printed on the terminal
    line = app.quit_state.crash_line
    assert line is not None and "(ZeroDivisionError: planted bug in a handler)" in line
    [log] = (spectui_home / "logs").iterdir()
    assert str(log) in line and "Traceback" in log.read_text()
    capsys.readouterr()
    assert report_exit(app) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"spectui: {line}"


# ----- without a screen ---------------------------------------------------------------------------


class LogOnly(App[None]):
    def compose(self) -> ComposeResult:
        yield ChatLog()


@run_async
async def test_a_reply_shows_no_leading_blank_lines_streamed_reopened_or_coloured() -> None:
    text = "\n\n  \n\nHello there\n\nsecond paragraph"
    app = LogOnly()
    async with app.run_test() as pilot:
        log = app.query_one(ChatLog)
        reopened = AssistantMessage(text, meta="m")
        streamed = AssistantMessage(streaming=True)
        await log.add(reopened)
        await log.add(streamed)
        for piece in ["\n", "\n  ", "\n\nHel", "lo there\n\nsecond paragraph"]:
            await streamed.append([ReplyPiece(piece)])
        await streamed.finish(ReplyFigures("eos"), "m")
        await pilot.pause()
        for widget in (reopened, streamed):
            assert widget.text == text  # what is saved is what the model wrote
            assert widget.query_one(Markdown).source.startswith("Hello there")
            assert widget.coloured_text().plain == "Hello there\n\nsecond paragraph"


@run_async
async def test_a_chat_whose_title_looks_like_markup_is_listed_as_typed() -> None:
    from textual.widgets import OptionList

    from spectui.chat.store import ChatSummary
    from spectui.ui.screens import ChatsScreen

    titles = ["what does [/bold] close?", "a [link=x] and [b]bold[/b"]
    app = LogOnly()
    async with app.run_test() as pilot:
        await app.push_screen(ChatsScreen([ChatSummary(i, t, "tiny", "2026-11-23T04:12", 1)
                                           for i, t in enumerate(titles)]))
        await pilot.pause()
        listing = app.screen.query_one(OptionList)
        labels = [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert [label.split("  ·  ")[0] for label in labels] == titles
        assert labels[0].endswith("1 message  ·  2026-11-23 04:12  ·  chat 0")  # the id `spectui export` takes


def test_counts_are_plural_only_when_they_are_not_one_and_odd_stats_do_not_break() -> None:
    stored = ReplyFigures.from_stored
    assert meta_line(stored({"tokens": 1})) == "1 token"
    assert meta_line(stored({"tokens": 2})).startswith("2 tokens")
    odd = {"tokens": "many", "acceptance": "high", "mean_accepted": None, "tps": [1], "reason": ["x"],
           "drafted": float("nan"), "by_drafter": {"model": "x", 3: {}}}
    assert meta_line(stored(odd)) == "0 tokens"


def test_low_acceptance_advice_depends_on_what_the_draft_is(tiny_pair, tmp_path) -> None:
    from spectui.catalog.demo import quantize

    q8 = tmp_path / "target-q8.gguf"
    quantize(tiny_pair.target, q8, "Q8_0")
    with LlamaModel.load(tiny_pair.target, n_ctx=256) as target, \
            LlamaModel.load(tiny_pair.draft, n_ctx=256) as draft, LlamaModel.load(q8, n_ctx=256) as requantized:
        assert same_model(target, requantized) and not same_model(target, draft)
    totals = GenerationStats()
    totals.drafted, totals.accepted = 40, 6
    family = low_acceptance_advice(totals, "5")
    precision = low_acceptance_advice(totals, "5", same_model=True)
    assert family is not None and "same family" in family
    assert precision is not None and "same family" not in precision and "lower precision" in precision
