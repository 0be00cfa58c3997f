"""The user's past chats as history for the drafters that learn from them (suffix decoding).

Two steps, because they run on different threads and need different things:

1. `read_past_chats(store)` reads the newest chats' messages, on the thread that owns the store
   (an SQLite connection belongs to the thread that opened it), up to a character budget, and
   returns them oldest first: plain values, safe to hand to another thread.
2. `history_source(chats)` is what `load_generator(..., history=)` takes: given the loaded target,
   it renders each chat with the target's chat format, as the conversation would be sent
   (without the generation prompt), and tokenizes it, so the history matches prompts token for
   token. It runs once, at load, in the loading thread.

Memory: at most `MAX_CHARS` characters are read (about 1 MB); the suffix drafter keeps at most
its token budget of them (200k tokens, about 4.9 MB) and evicts the oldest chats first.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from spectui.chat.template import ChatFormat, ChatMessage, encode_prompt
from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from spectui.engine.drafters.spec import HistorySource
    from spectui.engine.model.llama_model import LlamaModel

MAX_CHARS = 1_000_000
"""Characters of past chats read at most (about 250k tokens of English, more than the suffix
drafter keeps)."""


class _Summary(Protocol):
    @property
    def id(self) -> int: ...


class _Message(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...


class ChatReader(Protocol):
    """What is read from the chat store (`ChatStore` or a wrapper with the same two calls)."""

    def list_chats(self) -> Sequence[_Summary]:
        """Chats, the most recently changed first."""

    def messages(self, chat_id: int) -> Sequence[_Message]: ...


@dataclass(frozen=True)
class PastChat:
    chat_id: int
    messages: tuple[ChatMessage, ...]

    @property
    def chars(self) -> int:
        return sum(len(m.content) for m in self.messages)


def read_past_chats(store: ChatReader, max_chars: int = MAX_CHARS) -> list[PastChat]:
    """The newest chats that fit in `max_chars`, oldest first; [] when the store cannot be read
    (history only speeds replies up: its absence must never stop the app)."""
    chats: list[PastChat] = []
    total = 0
    try:
        summaries = list(store.list_chats())
        for summary in summaries:
            messages = tuple(ChatMessage(m.role, m.content) for m in store.messages(summary.id) if m.content)
            chat = PastChat(summary.id, messages)
            if not messages:
                continue
            if total + chat.chars > max_chars:
                break
            chats.append(chat)
            total += chat.chars
    except (sqlite3.Error, OSError, SpectuiError):
        pass
    return chats[::-1]


def history_source(chats: Sequence[PastChat]) -> HistorySource:
    """The chats as token lists of whichever target is loaded, rendered with its chat format."""

    def tokens_for(target: LlamaModel) -> Iterator[list[int]]:
        chat_format = ChatFormat.from_model(target)
        for chat in chats:
            try:
                text = chat_format.render(chat.messages, add_generation_prompt=False)
            except SpectuiError:
                continue  # the template refuses these messages: skip the chat, not the load
            yield encode_prompt(target, text)

    return tokens_for


def store_history(store: ChatReader, max_chars: int = MAX_CHARS) -> HistorySource:
    """Both steps for a caller on the store's thread: read now, tokenize at load."""
    return history_source(read_past_chats(store, max_chars))
