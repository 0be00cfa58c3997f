"""The message box: several lines, Enter sends, Shift+Enter or Ctrl+J starts a new line.

Many terminals send Shift+Enter as a plain Enter (only those speaking the kitty keyboard
protocol tell them apart), so Ctrl+J, which every terminal sends as a line feed, always works.
A paste arrives as one bracketed-paste event and is inserted whole, newlines included: a
200-line paste stays one message. Up in an empty box edits the last message you sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.strip import Strip
from textual.widgets import TextArea

NEWLINE_KEYS = ("shift+enter", "ctrl+j")
PLACEHOLDER = "Message · Enter sends · Ctrl+J new line · ↑ edits your last message"
APP_KEYS = ("f6", "f7")
"""TextArea selects a line / everything with these; in the chat they colour tokens and pick the drafter."""


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
