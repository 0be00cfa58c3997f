"""A reply's reasoning, shown as a "thinking" block above its answer.

The block opens while the model thinks (its text streams in), folds as soon as the answer
starts, and stays folded in a reopened chat; Enter on its title, or a click, opens it again.
With colours on (F6), its tokens are coloured by origin like the answer's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.text import Text
from textual.widgets import Collapsible, Static

from spectui.safe_text import block
from spectui.session.figures import plural

Piece = tuple[str, str]


def thinking_title(streaming: bool, tokens: int | None = None) -> str:
    if streaming:
        return "thinking…"
    return f"thought for {plural(tokens, 'token')}" if tokens else "thought"


class ThinkingBlock(Collapsible):
    """The collapsible reasoning of one reply (hidden while there is none)."""

    def __init__(self, text: str = "", *, streaming: bool = False, tokens: int | None = None) -> None:
        self.body = Static(Text(block(text.strip().replace("\r", ""))), classes="thinking-text")
        super().__init__(self.body, title=thinking_title(streaming, tokens), collapsed=not streaming,
                         classes="thinking")
        self.display = bool(text.strip())

    def show_text(self, text: Text, streaming: bool) -> None:
        """Show the reasoning so far (the caller decides its colours)."""
        self.display = bool(text.plain.strip())
        self.body.update(text)
        if streaming and self.title != thinking_title(True):
            self.title = thinking_title(True)

    def fold(self, tokens: int | None = None) -> None:
        """The answer has started (or the reply ended): fold, and say how long it thought."""
        self.collapsed = True
        self.title = thinking_title(False, tokens)

    def set_tokens(self, tokens: int) -> None:
        if tokens:
            self.title = thinking_title(False, tokens)


def pieces_text(pieces: Iterable[Piece], style: Callable[[str], str] | None = None) -> Text:
    """The reasoning as text, stripped of surrounding blank lines; coloured by origin when
    `style` maps an origin to its style."""
    text = Text()
    for piece, origin in pieces:
        text.append(block(piece.replace("\r", "")), style=style(origin) if style else "")
    plain = text.plain
    start = len(plain) - len(plain.lstrip())
    end = len(plain.rstrip())
    return text[start:end]
