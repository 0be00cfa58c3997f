"""The open chat: its messages in memory, mirrored into the store as they happen.

A user message is saved when sent; a reply is saved as an incomplete row when it starts,
rewritten every few seconds while it streams, and marked complete with its stats at the end.
The database row for a chat is created with its first message, so opening the app and quitting
leaves no empty chats behind.

The messages in memory are the truth. With a `SafeStore` a write can fail (it then returns
None/False and has told the user); the conversation remembers how much of itself is on disk and
writes the rest at its next write. When the store's file was replaced (a damaged store moved
aside and salvaged), the ids it holds are stale: it deletes its salvaged copy and writes itself
again, whole.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from spectui.chat.store import ChatSummary, StoredMessage
from spectui.chat.template import ChatMessage

PARTIAL_SAVE_SECONDS = 2.0


class Store(Protocol):
    """What a conversation needs from `ChatStore` (raises) or `SafeStore` (returns None/False)."""

    generation: int

    def new_chat(self, pair: str = "") -> int | None: ...
    def chat_pair(self, chat_id: int) -> str: ...
    def delete_chat(self, chat_id: int) -> bool: ...
    def list_chats(self, limit: int = 100) -> list[ChatSummary]: ...
    def messages(self, chat_id: int) -> list[StoredMessage]: ...
    def add_message(self, chat_id: int, role: str, content: str, *, complete: bool = True,
                    stats: dict[str, Any] | None = None) -> int | None: ...
    def update_message(self, message_id: int, content: str, *, complete: bool,
                       stats: dict[str, Any] | None = None) -> bool: ...


class Conversation:
    def __init__(self, store: Store, pair: str = "", system: str | None = None) -> None:
        self.store = store
        self.pair = pair
        self.system = system
        self.chat_id: int | None = None
        self.mode = "chat"
        """How the model reads this chat: `chat`, `completion` (text continued) or `plain-chat`."""
        self.messages: list[ChatMessage] = []
        self.stored: list[StoredMessage] = []
        """What was loaded from the store when the chat was reopened (with stats, completeness)."""
        self._stats: dict[int, dict[str, Any]] = {}
        """Stats of finished replies by their index in `messages` (written again after a loss)."""
        self._saved = 0
        """How many of `_rows()` are on disk, in order."""
        self._generation = store.generation
        self._replying = False
        self._reply_text = ""
        self._reply_id: int | None = None
        """The row of the reply in progress, or of a finished one whose final text is not saved."""
        self._last_save = 0.0

    @classmethod
    def open(cls, store: Store, chat_id: int) -> Conversation:
        conversation = cls(store, store.chat_pair(chat_id))
        conversation.chat_id = chat_id
        conversation.stored = store.messages(chat_id)
        for message in conversation.stored:
            if message.role == "system":
                conversation.system = message.content
            else:
                conversation._stats[len(conversation.messages)] = message.stats
                conversation.messages.append(ChatMessage(message.role, message.content))
        conversation._saved = len(conversation.stored)
        return conversation

    def prompt_messages(self, upto: int | None = None) -> list[ChatMessage]:
        """System prompt (if any) and the turns, optionally only the first `upto` of them."""
        turns = self.messages if upto is None else self.messages[:upto]
        head = [ChatMessage("system", self.system)] if self.system else []
        return head + list(turns)

    # ----- writing -------------------------------------------------------------------------------

    def _rows(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        """(role, content, stats) of every finished row, system prompt first."""
        head = [("system", self.system, None)] if self.system else []
        turns = [(m.role, m.content, self._stats.get(i)) for i, m in enumerate(self.messages)]
        return head + turns

    def _sync(self) -> bool:
        """Write whatever is not on disk yet (everything, after the store's file was replaced),
        then the row of the reply in progress. False when a write failed (it is retried later).
        If the file is replaced during these writes, the chat is written again, whole, at once."""
        ok = self._sync_once()
        if self.store.generation != self._generation:
            ok = self._sync_once()
        return ok

    def _sync_once(self) -> bool:
        if self.store.generation != self._generation:
            if self.chat_id is not None:
                self.store.delete_chat(self.chat_id)  # the salvaged copy: rewritten whole below
            self.chat_id, self._saved, self._reply_id = None, 0, None
            self._generation = self.store.generation
        if self.chat_id is None:
            self._saved, self._reply_id = 0, None
            self.chat_id = self.store.new_chat(self.pair)
            if self.chat_id is None:
                return False
        rows = self._rows()
        while self._saved < len(rows):
            role, content, stats = rows[self._saved]
            if self._reply_id is not None and role == "assistant":  # the reply's own row, finished
                if not self.store.update_message(self._reply_id, content, complete=True, stats=stats):
                    return False
                self._reply_id = None
            elif self.store.add_message(self.chat_id, role, content, stats=stats) is None:
                return False
            self._saved += 1
        if self._replying and self._reply_id is None:
            self._reply_id = self.store.add_message(self.chat_id, "assistant", self._reply_text, complete=False)
            return self._reply_id is not None
        return True

    def add_user(self, text: str) -> None:
        self.messages.append(ChatMessage("user", text))
        self._sync()

    def start_reply(self) -> None:
        self._replying, self._reply_text = True, ""  # _reply_id may still name an unsaved reply's row
        self._sync()
        self._last_save = time.monotonic()

    def save_partial(self, text: str) -> bool:
        """Rewrite the reply in progress if the last save is a few seconds old."""
        if not self._replying or time.monotonic() - self._last_save < PARTIAL_SAVE_SECONDS:
            return False
        self._reply_text = text
        self._last_save = time.monotonic()
        if not self._sync() or self._reply_id is None:
            return False
        return self.store.update_message(self._reply_id, text, complete=False)

    def finish_reply(self, text: str, stats: dict[str, Any]) -> None:
        self._replying = False
        self._stats[len(self.messages)] = stats
        self.messages.append(ChatMessage("assistant", text))
        self._sync()

    @property
    def last_user_index(self) -> int | None:
        """Index in `messages` of the last user turn (the prompt a comparison re-runs)."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index].role == "user":
                return index
        return None
