"""The chat log: user turns, streamed Markdown replies, notes, and side-by-side comparisons.

A reply streams through Textual's `MarkdownStream`, which merges fragments when they arrive
faster than the widget can render, so code blocks render as they are typed. Each reply also
keeps its (text, origin) pieces so it can be shown coloured by origin instead (toggled): tokens
accepted from a draft model, from a lookup (n-gram, suffix) or from MTP heads, and the target's own.
A reasoning model's thinking arrives apart from its answer (the reply core cuts it,
`spectui.session.reply`) and goes into a folding block above the answer (`spectui.ui.thinking`).

User turns and replies carry `turn`, their index in the conversation, so an edited or
regenerated turn and everything after it can be taken off the log (`ChatLog.remove_from_turn`).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from spectui.chat.conversation import Conversation
from spectui.engine.drafters import colour_of
from spectui.engine.events import TARGET
from spectui.safe_text import block
from spectui.session.figures import ReplyFigures, meta_line
from spectui.session.reply import ReplyPiece
from spectui.ui.thinking import ThinkingBlock, pieces_text

OTHER_DRAFTER_STYLE = "green"
"""Colour of tokens accepted from a drafter that is not a registered kind (a test's scripted one)."""
Piece = tuple[str, str]
"""(text, origin): origin is `target` or the drafter whose proposal the target accepted."""


def origin_style(origin: str) -> str:
    """Colour of tokens accepted from drafter `origin`, as its kind declares (`KINDS`); the
    target's own tokens keep the default."""
    if origin == TARGET:
        return ""
    return colour_of(origin) or OTHER_DRAFTER_STYLE


def leading_blank(text: str) -> int:
    """How many characters of blank lines `text` starts with (models often open a reply with
    newlines); the first line with something on it keeps its indentation."""
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        return len(text)
    first = len(text) - len(stripped)
    return text.rfind("\n", 0, first) + 1


def shown(text: str) -> str:
    """Text from outside (a reply, a note quoting a name) as the log shows it: terminal-safe
    (`safe_text.block`); a CR is dropped, as Rich drops it (a model may end lines with CR LF)."""
    return block(text.replace("\r", ""))


class UserMessage(Static):
    def __init__(self, text: str, turn: int | None = None, *, queued: bool = False) -> None:
        super().__init__(Text(shown(text)), classes="user-message")
        self.text = text
        self.turn = turn
        self.set_queued(queued)

    def set_queued(self, queued: bool) -> None:
        self.border_title = "you · queued (sent once the models are ready; Escape cancels)" if queued else "you"
        self.set_class(queued, "-queued")


class NoteMessage(Static):
    """Something the app says in the log (template fallback, errors, stopped replies)."""

    def __init__(self, text: str, kind: str = "info") -> None:
        super().__init__(Text(shown(text)), classes=f"note-message {kind}")


class AssistantMessage(Vertical):
    """One reply: Markdown while streaming, or coloured by token origin when toggled; its
    reasoning (if any) in a thinking block above it."""

    can_focus = True  # so a click or Tab picks the reply that F9 copies

    def __init__(self, text: str = "", *, title: str = "assistant", streaming: bool = False,
                 pieces: Iterable[Piece] = (), meta: str = "",
                 figures: ReplyFigures | None = None, reasoning: str = "", turn: int | None = None) -> None:
        super().__init__(classes="assistant-message")
        self.border_title = title
        self.turn = turn
        self.pieces: list[Piece] = list(pieces) or ([(text, TARGET)] if text else [])
        """The answer's (text, origin) pieces."""
        self.reasoning_pieces: list[Piece] = [(reasoning, TARGET)] if reasoning else []
        self._initial = text
        self._streaming = streaming
        self._stream: MarkdownStream | None = None
        self._head: str | None = ""
        """The streamed text while it is only blank lines (None once text has been shown)."""
        self._thinking_now = False
        """The last piece streamed was thinking."""
        self._meta = meta
        self.figures = figures
        """The finished reply's figures (None while it streams, or for a reply stored without)."""
        self.colouring = False
        self.thinking = ThinkingBlock(reasoning, streaming=streaming, tokens=self._thinking_tokens)

    @property
    def streaming(self) -> bool:
        return self._stream is not None

    @property
    def meta(self) -> str:
        return self._meta

    @property
    def text(self) -> str:
        """The answer (without the reasoning)."""
        return "".join(text for text, _ in self.pieces)

    @property
    def reasoning(self) -> str:
        return "".join(text for text, _ in self.reasoning_pieces).strip()

    @property
    def in_reasoning(self) -> bool:
        """Still thinking: the last text streamed was reasoning."""
        return self._thinking_now

    @property
    def _thinking_tokens(self) -> int | None:
        return self.figures.thinking_tokens or None if self.figures is not None else None

    def compose(self) -> ComposeResult:
        body = self._initial or self.text
        yield self.thinking
        yield Markdown(shown(body[leading_blank(body):]), classes="body")
        yield Static(classes="coloured")
        yield Static(Text(shown(self._meta)), classes="meta")

    def on_mount(self) -> None:
        if self._streaming:
            self._stream = Markdown.get_stream(self.query_one(Markdown))

    async def append(self, pieces: Iterable[ReplyPiece]) -> None:
        """Streamed pieces, in order: thinking goes to the thinking block, the answer below it."""
        pieces = list(pieces)
        if pieces:
            self._thinking_now = pieces[-1].thinking
        answer = [(p.text, p.origin) for p in pieces if not p.thinking]
        thought = [(p.text, p.origin) for p in pieces if p.thinking]
        if thought:
            self.reasoning_pieces.extend(thought)
            self._show_reasoning()
        if not answer:
            return
        self.pieces.extend(answer)
        fragment = "".join(text for text, _ in answer)
        if self._stream is not None:
            if self._head is not None:  # the Markdown starts at the first line with text in it
                self._head += fragment
                skip = leading_blank(self._head)
                fragment = "" if skip == len(self._head) else self._head[skip:]
                if fragment:
                    self._head = None
                    if self.reasoning_pieces:
                        self.thinking.fold(self._thinking_tokens)
            if fragment:
                await self._stream.write(shown(fragment))
        if self.colouring:
            self._paint()

    def _show_reasoning(self) -> None:
        style = origin_style if self.colouring else None
        self.thinking.show_text(pieces_text(self.reasoning_pieces, style), self._head is not None)

    async def finish(self, figures: ReplyFigures, meta: str) -> None:
        self.figures = figures
        self._thinking_now = False
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if self.reasoning_pieces:
            self.thinking.fold(self._thinking_tokens)
        self.set_meta(meta)

    def set_meta(self, meta: str) -> None:
        self._meta = meta
        for line in self.query(".meta").results(Static):  # none while the app closes under it
            line.update(Text(shown(meta)))

    def set_colouring(self, on: bool) -> None:
        self.colouring = on
        self.set_class(on, "-coloured")
        if on:
            self._paint()
        if self.reasoning_pieces:
            self._show_reasoning()

    def coloured_text(self) -> Text:
        """The reply with accepted draft tokens in green, without its leading blank lines."""
        text = Text()
        for piece, origin in self.pieces:
            text.append(shown(piece), style=origin_style(origin))
        return text[leading_blank(text.plain):]

    def _paint(self) -> None:
        for coloured in self.query(".coloured").results(Static):
            coloured.update(self.coloured_text())


class Comparison(Vertical):
    """The last reply beside the same prompt re-run with speculation off."""

    def __init__(self, original: AssistantMessage) -> None:
        super().__init__(classes="comparison")
        k_label = original.figures.k if original.figures is not None and original.figures.k else "?"
        self.left = AssistantMessage(title=f"speculative (K={k_label})", pieces=original.pieces,
                                     meta=original.meta, figures=original.figures)
        self.right = AssistantMessage(title="speculation off (K=0)", streaming=True)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="sides"):
            yield self.left
            yield self.right
        yield Static("", classes="verdict")

    def set_verdict(self, verdict: str) -> None:
        self.query_one(".verdict", Static).update(verdict)


class ChatLog(VerticalScroll):
    """Scrolls with new content unless the user has scrolled up."""

    def on_mount(self) -> None:
        self.anchor()

    async def add(self, widget: Widget) -> Widget:
        await self.mount(widget)
        self.anchor()
        return widget

    def last_reply(self) -> AssistantMessage | None:
        replies = [m for m in self.children if isinstance(m, AssistantMessage)]
        return replies[-1] if replies else None

    def turn_widget(self, turn: int) -> UserMessage | AssistantMessage | None:
        for child in self.children:
            if isinstance(child, UserMessage | AssistantMessage) and child.turn == turn:
                return child
        return None

    async def show_stored(self, conversation: Conversation, colouring: bool, show_timings: bool) -> None:
        """The log anew, showing a stored conversation (its system prompt, turns and figures)."""
        await self.remove_children()
        if conversation.system:
            await self.add(NoteMessage(f"system prompt: {conversation.system}", "info"))
        for turn, message in enumerate(conversation.messages):
            if message.role == "user":
                await self.add(UserMessage(message.content, turn))
            elif message.role == "assistant":
                figures = ReplyFigures.from_stored(conversation.stats(turn))
                meta = ("interrupted (saved before it finished)" if conversation.interrupted(turn)
                        else meta_line(figures, show_timings))
                reply = AssistantMessage(message.content, meta=meta, figures=figures, reasoning=message.reasoning,
                                         turn=turn)
                reply.set_colouring(colouring)
                await self.add(reply)

    async def remove_from_turn(self, turn: int) -> None:
        """Take the turn's widget, and everything shown after it, off the log."""
        children = list(self.children)
        first = next((i for i, child in enumerate(children)
                      if isinstance(child, UserMessage | AssistantMessage) and child.turn is not None
                      and child.turn >= turn), None)
        if first is not None:
            await self.remove_children(children[first:])
