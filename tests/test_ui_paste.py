"""A paste holding control characters and escape sequences arrives whole and in order, is shown
escaped in the message box, is sent exactly as pasted, and the box goes on taking keys (#36).

Two levels: the raw bytes a terminal sends for a bracketed paste, fed to the input parser the app
runs with (`spectui.ui.paste.PasteParser`, any split of the input into reads); and the message box
in an app driven by Textual's Pilot, given the `Paste` event that parser posts.
"""

from __future__ import annotations

import time

import pytest
from chat_stores import saved
from textual import events
from textual.app import App, ComposeResult
from ui_harness import SIZE, RecordingApp, options, ready, run_async, until

from spectui.ui import paste
from spectui.ui.chat_view import UserMessage
from spectui.ui.paste import PasteParser
from spectui.ui.prompt import PromptInput

START, END = "\x1b[200~", "\x1b[201~"
PASTES = {
    "colours": "hello \x1b[31mred\x1b[0m world",
    "osc 52, bel, backspaces": "copy \x1b]52;c;aGVsbG8=\x07 then\x08\x08 more text after it, long enough to matter",
    "tab and escapes alone": "a\tb \x1b \x1b\x1b end",
    "every control": "".join(chr(c) for c in range(1, 32) if c not in (10, 13)) + "\x7f\x85\x9b text",
    "a long sequence": "\x1b[" + "1;" * 40 + "m after",
    "line separators": "one\u2028two\u2029three\x0bfour\x0cfive\x85six",
}


def parsed(data: str, read: int) -> list[events.Event]:
    """What the parser posts for `data` arriving `read` characters at a time, after a pause."""
    parser = PasteParser()
    found: list[events.Event] = []
    for start in range(0, len(data), read):
        found += parser.feed(data[start:start + read])  # type: ignore[arg-type]
    time.sleep(0.15)  # past ESCDELAY: a lone ESC at the end is the Escape key
    found += parser.tick()  # type: ignore[arg-type]
    return found


def described(found: list[events.Event]) -> list[tuple[str, str]]:
    return [("paste", e.text) if isinstance(e, events.Paste) else ("key", e.key)  # type: ignore[attr-defined]
            for e in found]


@pytest.mark.parametrize("name", PASTES)
@pytest.mark.parametrize("read", [1, 3, 4096])
def test_a_paste_is_one_event_holding_exactly_what_was_pasted(name: str, read: int) -> None:
    text = PASTES[name]
    data = "ab" + START + text + END + "x\x1b[A" + START + "second" + END + "\x1b"
    assert described(parsed(data, read)) == [
        ("key", "a"), ("key", "b"), ("paste", text), ("key", "x"), ("key", "up"), ("paste", "second"),
        ("key", "escape")]


def test_a_paste_cut_off_by_the_end_of_input_is_still_delivered() -> None:
    parser = PasteParser()
    found = list(parser.feed(START + "half \x1b[3"))
    found += list(parser.feed(""))
    assert described(found) == [("paste", "half \x1b[3")]  # type: ignore[arg-type]


def test_the_app_reads_the_terminal_with_this_parser() -> None:
    from textual.drivers import linux_driver, linux_inline_driver

    paste.install()
    assert linux_driver.XTermParser is PasteParser and linux_inline_driver.XTermParser is PasteParser


# ----- the message box ----------------------------------------------------------------------------


class BoxApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def compose(self) -> ComposeResult:
        yield PromptInput(id="prompt")

    def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        self.sent.append(event.text)


def drawn(box: PromptInput) -> str:
    """The characters the box sends to the terminal for its visible lines, run together."""
    return "".join(segment.text for y in range(box.size.height) for segment in box.render_line(y))


@pytest.mark.parametrize("name", PASTES)
@run_async
async def test_the_box_shows_controls_escaped_sends_them_as_pasted_and_keeps_taking_keys(name: str) -> None:
    text = PASTES[name]
    app = BoxApp()
    async with app.run_test(size=(100, 12)) as pilot:
        box = app.query_one(PromptInput)
        box.focus()
        app.post_message(events.Paste(text))
        await until(pilot, lambda: box.text == text, "the paste in the box")
        await pilot.pause()
        screen = drawn(box)
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in screen), repr(screen)
        assert "\u241b" in screen or "\u2409" not in text  # ESC drawn as its control picture
        await pilot.press("z", "enter")
        assert app.sent == [text + "z"]
        box.select_all()
        assert box.selected_text == text + "z"


@run_async
async def test_a_control_picture_typed_as_such_stays_one(spectui_home) -> None:
    app = BoxApp()
    async with app.run_test(size=(80, 10)) as pilot:
        box = app.query_one(PromptInput)
        box.focus()
        app.post_message(events.Paste("\u241b is how ESC is drawn"))
        await until(pilot, lambda: box.text.startswith("\u241b"), "the paste")
        await pilot.press("enter")
        assert app.sent == ["\u241b is how ESC is drawn"]


@run_async
async def test_a_paste_with_escape_sequences_is_saved_and_shown_as_pasted(pair) -> None:
    pasted = "explain this: \x1b[31mred\x1b[0m and \x1b]52;c;aGVsbG8=\x07 please"
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.post_message(events.Paste(pasted))
        await until(pilot, lambda: app.prompt.text == pasted, "the paste in the message box")
        await pilot.press("enter")
        await until(pilot, lambda: app.finishes and app.replies.busy is None, "the reply")
        [user] = app.query(UserMessage)
        assert user.text == pasted
        assert "\x1b" not in str(user.content) and "\\x1b[31mred" in str(user.content)
        await pilot.press("a")
        assert app.prompt.text == "a"  # the box still takes keys
    assert saved()[0] == ("user", pasted)


@pytest.fixture
def pair(tiny_pair, spectui_home):
    return tiny_pair
