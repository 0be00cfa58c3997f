"""The message box: several lines, Enter sends, Shift+Enter or Ctrl+J starts a new line.

Many terminals send Shift+Enter as a plain Enter (only those speaking the kitty keyboard
protocol tell them apart), so Ctrl+J, which every terminal sends as a line feed, always works.
A paste arrives as one bracketed-paste event and is inserted whole, newlines included: a
200-line paste stays one message (`spectui.ui.paste` makes Textual deliver one holding escape
sequences whole and in order). Up in an empty box edits the last message you sent.

Control characters (C0 but newline, tab and CR; DEL; C1) and the line and paragraph separators
are kept exactly as pasted and sent as they are, but never reach the terminal: the box holds each
as a stand-in character of the same width (a private-use code point, U+100000 + its code) and
draws it as its Unicode picture (`␛` for ESC, `␇` for BEL, `␦` for a C1 control), reversed;
`text` and the copied selection give the characters back. (A private-use character of those code
points typed or pasted as such is sent as the character it stands for. CR LF and CR are line
breaks, as in any text box.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widgets import TextArea

NEWLINE_KEYS = ("shift+enter", "ctrl+j")
PLACEHOLDER = "Message · Enter sends · Ctrl+J new line · ↑ edits your last message"
APP_KEYS = ("f6", "f7")
"""TextArea selects a line / everything with these; in the chat they colour tokens and pick the drafter."""

STAND_IN = 0x100000
"""The box holds character C that must not reach the terminal as chr(STAND_IN + ord(C)) (Unicode
plane 16, private use: one cell wide, as its picture is)."""
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 but tab, newline and CR; DEL; C1; the line and paragraph separators (which the box would
otherwise take as line breaks, changing the text)."""
_STAND_INS = re.compile(f"[{chr(STAND_IN)}-{chr(STAND_IN + 0x9F)}{chr(STAND_IN + 0x2028)}{chr(STAND_IN + 0x2029)}]")
_PICTURES = {0x7F: "\u2421", 0x2028: "\u2424", 0x2029: "\u00b6"}
"""DEL, LS and PS; C0 has its own control pictures (U+2400 + code), C1 is shown as U+2426."""


def boxed(text: str) -> str:
    """`text` as the box holds it: each such character replaced by its stand-in."""
    return _CONTROLS.sub(lambda m: chr(STAND_IN + ord(m[0])), text)


def unboxed(text: str) -> str:
    """The box's text as typed and pasted: each stand-in back to its character."""
    return _STAND_INS.sub(lambda m: chr(ord(m[0]) - STAND_IN), text)


def picture(stand_in: str) -> str:
    """How the box draws a stand-in: the Unicode picture of its character, one cell wide."""
    code = ord(stand_in) - STAND_IN
    return chr(0x2400 + code) if code < 0x20 else _PICTURES.get(code, "\u2426")


def _binding_keys(binding: BindingType) -> set[str]:
    key = binding.key if isinstance(binding, Binding) else binding[0]
    return {part.strip() for part in key.split(",")}


class PromptInput(TextArea, inherit_bindings=False):
    """A TextArea that posts `Submitted` on Enter instead of inserting a line break."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *(b for b in TextArea.BINDINGS if not _binding_keys(b) & set(APP_KEYS)),
        Binding("ctrl+j", "newline", "New line", show=False),
    ]

    @dataclass
    class Submitted(Message):
        prompt: PromptInput
        text: str

    @dataclass
    class EditLast(Message):
        """Up in an empty box: the user wants to edit the last message sent."""

        prompt: PromptInput

    def __init__(self, **kwargs: object) -> None:
        super().__init__(soft_wrap=True, tab_behavior="focus", show_line_numbers=False,
                         placeholder=PLACEHOLDER, highlight_cursor_line=False, **kwargs)  # type: ignore[arg-type]

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            self._take(event)
            self.post_message(self.Submitted(self, self.text))
            return
        if event.key in NEWLINE_KEYS:
            self._take(event)
            self.action_newline()
            return
        if event.key == "up" and not self.text:
            self._take(event)
            self.post_message(self.EditLast(self))
            return
        await super()._on_key(event)

    @staticmethod
    def _take(event: events.Key) -> None:
        event.stop()
        event.prevent_default()

    @property
    def text(self) -> str:
        """What the user typed and pasted, control characters included."""
        return unboxed(self.document.text)

    @text.setter
    def text(self, value: str) -> None:
        self.load_text(value)

    @property
    def selected_text(self) -> str:
        return unboxed(super().selected_text)

    def load_text(self, text: str) -> None:
        super().load_text(boxed(text))

    async def _on_paste(self, event: events.Paste) -> None:
        """Before TextArea inserts the paste: its controls as their stand-ins."""
        event.text = boxed(event.text)

    def get_line(self, line_index: int) -> Text:
        """TextArea's line, each stand-in drawn as its control picture, reversed."""
        line = super().get_line(line_index)
        if _STAND_INS.search(line.plain) is None:
            return line
        drawn = Text(_STAND_INS.sub(lambda m: picture(m[0]), line.plain), end=line.end, no_wrap=line.no_wrap)
        for span in line.spans:
            drawn.stylize(span.style, span.start, span.end)
        for match in _STAND_INS.finditer(line.plain):
            drawn.stylize("reverse", match.start(), match.end())
        return drawn

    def render_line(self, y: int) -> Strip:
        """TextArea's, but blank while laid out with no room to wrap its placeholder in (Textual
        divides the placeholder by the width: zero columns would raise)."""
        if self.content_size.width < 1:
            return Strip.blank(self.size.width, self.visual_style.rich_style)
        return super().render_line(y)

    def action_newline(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)

    def set_text(self, text: str) -> None:
        """Replace the contents and put the cursor at the end (after an edit or a cancel)."""
        self.load_text(text)
        self.move_cursor(self.document.end)
