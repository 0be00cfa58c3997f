"""Completion mode's first screen: what a base model does, and three openings to start from.

A model without a chat template continues text rather than answering it. The app says so in one
line and offers a story opening, a list and a code stub: F8 moves between them, Enter or a click
sends the one picked as the first message.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Button, Static

EXAMPLES: tuple[tuple[str, str], ...] = (
    ("story", "The lighthouse keeper found the bottle on a grey morning in March. Inside was a letter, "
              "and the first line read:"),
    ("list", "Ten things to pack for a week of hiking in the mountains:\n\n1."),
    ("code", 'def is_prime(n: int) -> bool:\n    """Return True if n is a prime number."""\n'),
)
PREVIEW = 56
HINT = "base model: it continues your text — try one of these (F8 picks, Enter sends)"


class ExampleOpenings(Vertical):
    """The hint and one button per example; pressing one posts `Picked`."""

    @dataclass
    class Picked(Message):
        text: str

    def compose(self) -> ComposeResult:
        yield Static(Text(HINT), classes="examples-hint")
        for name, text in EXAMPLES:
            first_line = text.splitlines()[0]
            preview = f"{first_line[:PREVIEW]}…" if len(first_line) > PREVIEW else first_line
            yield Button(f"{name}: {preview}", id=f"example-{name}", classes="example", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        name = (event.button.id or "").removeprefix("example-")
        text = dict(EXAMPLES).get(name)
        if text is not None:
            self.post_message(self.Picked(text))

    def focus_next_example(self) -> None:
        """F8: the first example, then the next one, round the row."""
        buttons = list(self.query(Button))
        focused = next((i for i, b in enumerate(buttons) if b.has_focus), -1)
        buttons[(focused + 1) % len(buttons)].focus()
