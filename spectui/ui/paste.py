"""A terminal paste delivered whole, whatever it holds: Textual's input parser, fixed for pastes.

A terminal sends a paste between `ESC [ 200 ~` and `ESC [ 201 ~` (bracketed paste). Textual's
`XTermParser` (textual 8) collects the paste's characters only while it is not inside an escape
sequence: an ESC in the pasted text (colour codes `ESC [ 31 m`, an OSC 52 `ESC ] 52 ; c ; ... BEL`)
starts one, and the characters after it (up to 32, or up to the next ESC) are then replayed as
*key presses*, ahead of the paste, ESC itself turned into `^`: the text arrives reordered and
changed, and its BEL, BS, TAB or Ctrl+letters act as keys (a TAB moves the focus out of the
message box; the rest of the paste lands in it with a raw ESC that the terminal then obeys when
the box is drawn, which can swallow everything drawn after it).

`PasteParser` wraps Textual's parser: it passes every character through to it, and when that
parser has just read the paste's opening sequence, reads the paste itself up to the closing one,
raw, and posts it as one `Paste` event (NUL dropped, as Textual does). Textual's parser is then
handed the closing sequence, which ends its own (empty) paste: that empty `Paste` is dropped.
`install()` makes Textual's terminal drivers build this parser (they name `XTermParser` in
their modules); the message box shows the controls escaped (`spectui.ui.prompt`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Generator
from typing import Any

from textual import events
from textual._parser import ParseEOF, ParseTimeout, Peek1, Read1, TokenCallback
from textual._xterm_parser import BRACKETED_PASTE_END, BRACKETED_PASTE_START, XTermParser
from textual.message import Message

DRIVER_MODULES = {"win32": ("textual.drivers.win32",)}.get(
    sys.platform, ("textual.drivers.linux_driver", "textual.drivers.linux_inline_driver"))
"""Textual's terminal drivers on this platform: each builds its parser as `XTermParser(...)`."""


class PasteParser(XTermParser):
    """`XTermParser`, except that a bracketed paste is read raw, whole and in order."""

    def parse(self, token_callback: TokenCallback[Message]) -> Generator[Read1 | Peek1, str, None]:
        closing = False

        def from_inner(token: Message) -> None:
            if not (closing and isinstance(token, events.Paste)):
                token_callback(token)

        inner = super().parse(from_inner)
        awaiting = next(inner)
        recent = ""  # the last characters the inner parser read as one run (no timeout between)
        while True:
            try:
                character = yield awaiting
            except ParseTimeout:
                recent = ""
                try:
                    awaiting = inner.throw(ParseTimeout())
                except StopIteration:
                    return
                continue
            except ParseEOF:
                _finish(inner)
                return
            try:
                awaiting = inner.send(character)
            except StopIteration:
                return
            recent = (recent + character)[-len(BRACKETED_PASTE_START):]
            if recent != BRACKETED_PASTE_START:
                continue
            recent = ""
            text, ended = yield from self._read_paste()
            token_callback(events.Paste(text.replace("\x00", "")))
            if not ended:
                _finish(inner)
                return
            closing = True  # the inner parser is inside its own paste: close it, drop its empty Paste
            try:
                for end_character in BRACKETED_PASTE_END:
                    awaiting = inner.send(end_character)
            except StopIteration:
                return
            finally:
                closing = False

    def _read_paste(self) -> Generator[Read1, str, tuple[str, bool]]:
        """The pasted text up to the closing sequence, and whether it came (not the end of input)."""
        characters: list[str] = []
        tail = ""
        while True:
            try:
                character = yield self.read1()
            except ParseEOF:
                return "".join(characters), False
            characters.append(character)
            tail = (tail + character)[-len(BRACKETED_PASTE_END):]
            if tail == BRACKETED_PASTE_END:
                return "".join(characters[: -len(BRACKETED_PASTE_END)]), True


def _finish(inner: Generator[Any, str, None]) -> None:
    with contextlib.suppress(StopIteration, ParseEOF):
        inner.throw(ParseEOF())


def install() -> None:
    """Make Textual's terminal drivers read input with `PasteParser`."""
    import importlib

    for name in DRIVER_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "XTermParser", None) is XTermParser:
            module.XTermParser = PasteParser  # type: ignore[attr-defined]
