"""The app at small terminal sizes, idle and mid-reply, and resized between them (Pilot, the tiny
real models): nothing crashes down to 20x6, below it one line asks for a larger window, and a reply
streamed through every resize comes out whole."""

from __future__ import annotations

import pytest
import tiny_gguf
from textual.widgets import Footer, Header
from ui_harness import GatedApp, RecordingApp, options, ready, run_async, send, shown, until

from spectui.ui.chat_view import AssistantMessage
from spectui.ui.fit import MIN_HEIGHT, MIN_WIDTH, TOO_SMALL, TooSmall, fit
from spectui.ui.stats_panel import StatsPanel

SMALL = [(40, 12), (30, 10), (20, 6)]


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home) -> tiny_gguf.TinyPair:
    return tiny_pair


def test_what_gives_way_as_the_window_shrinks() -> None:
    assert fit(120, 40) == fit(80, 16)
    assert fit(80, 16).panel and fit(80, 16).header and fit(80, 16).footer
    assert not fit(79, 40).panel
    assert not fit(40, 15).header and fit(40, 15).footer
    assert not fit(40, 9).footer and not fit(40, 9).too_small
    assert not fit(MIN_WIDTH, MIN_HEIGHT).too_small
    assert fit(MIN_WIDTH - 1, MIN_HEIGHT).too_small and fit(MIN_WIDTH, MIN_HEIGHT - 1).too_small


def too_small_shown(app: RecordingApp) -> bool:
    return isinstance(app.screen, TooSmall) and TOO_SMALL in shown(app.screen.query_one("#too-small"))


@pytest.mark.parametrize("size", SMALL)
@run_async
async def test_the_app_starts_and_answers_at_a_small_size(pair, size) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        assert not too_small_shown(app)
        assert not app.query_one(StatsPanel).display  # the panel gives way under 80 columns
        await send(pilot, "Hello")
        [reply] = app.query(AssistantMessage)
        assert reply.text == app.finishes[-1].finished.text and reply.text
        assert app.query_one(Footer).display == (size[1] >= 10)
        assert app.query_one(Header).display == (size[1] >= 16)
    assert app.return_code in (None, 0) and app.quit_state.crash_line is None


@run_async
async def test_a_reply_streams_through_every_resize_and_below_the_minimum_says_so(pair) -> None:
    app = GatedApp(options(pair, max_tokens=40))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Tell me a story", wait=False)
        await until(pilot, lambda: app.held.is_set(), "the reply to start streaming")
        for size in [*SMALL, (19, 6), (20, 5), (10, 3), *reversed(SMALL)]:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert too_small_shown(app) == (size[0] < MIN_WIDTH or size[1] < MIN_HEIGHT), size
        app.release()
        await until(pilot, lambda: app.replies.busy is None, "the reply to finish")
        await pilot.resize_terminal(18, 4)
        await pilot.pause()
        assert too_small_shown(app)
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not too_small_shown(app) and app.query_one(StatsPanel).display
        [reply] = app.query(AssistantMessage)
        assert reply.text == app.finishes[-1].finished.text and len(app.finishes[-1].finished.tokens) == 40
    assert app.return_code in (None, 0) and app.quit_state.crash_line is None


@pytest.mark.parametrize("size", [(20, 6), (30, 10)])
@run_async
async def test_dialogs_and_the_side_by_side_run_open_at_a_small_size(pair, size) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
        await pilot.press("f5")  # the same prompt again with speculation off, side by side
        await until(pilot, lambda: app.replies.busy is None and len(app.finishes) == 2, "the side-by-side run")
        for key in ("ctrl+s", "ctrl+o", "ctrl+p"):
            await pilot.press(key)
            await pilot.pause()
            await pilot.press("escape")
            await pilot.pause()
        await pilot.resize_terminal(12, 4)
        await pilot.pause()
        await pilot.resize_terminal(*size)
        await pilot.pause()
    assert app.return_code in (None, 0) and app.quit_state.crash_line is None
