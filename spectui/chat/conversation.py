"""The open chat: its messages in memory, mirrored into the store as they happen.

A user message is saved when sent; a reply is saved as an incomplete row when it starts,
rewritten every few seconds while it streams, and marked complete with its stats at the end.
The database row for a chat is created with its first message, so opening the app and quitting
leaves no empty chats behind.
"""

from __future__ import annotations

import time
from typing import Any

from spectui.chat.store import ChatStore, StoredMessage
from spectui.chat.template import ChatMessage

PARTIAL_SAVE_SECONDS = 2.0


class Conversation:
    def __init__(self, store: ChatStore, pair: str = "", system: str | None = None) -> None:
        self.store = store
        self.pair = pair
        self.system = system
        self.chat_id: int | None = None
        self.mode = "chat"
        """How the model reads this chat: `chat`, `completion` (text continued) or `plain-chat`."""
        self.messages: list[ChatMessage] = []
        self.stored: list[StoredMessage] = []
        """What was loaded from the store when the chat was reopened (with stats, completeness)."""
        self._reply_id: int | None = None
        self._last_save = 0.0

    @classmethod
    def open(cls, store: ChatStore, chat_id: int) -> Conversation:
        conversation = cls(store, store.chat_pair(chat_id))
        conversation.chat_id = chat_id
        conversation.stored = store.messages(chat_id)
        for message in conversation.stored:
            if message.role == "system":
                conversation.system = message.content
            else:
                conversation.messages.append(ChatMessage(message.role, message.content))
        return conversation

    def prompt_messages(self, upto: int | None = None) -> list[ChatMessage]:
        """System prompt (if any) and the turns, optionally only the first `upto` of them."""
        turns = self.messages if upto is None else self.messages[:upto]
        head = [ChatMessage("system", self.system)] if self.system else []
        return head + list(turns)

    def _ensure_chat(self) -> int:
        if self.chat_id is None:
            self.chat_id = self.store.new_chat(self.pair)
            if self.system:
                self.store.add_message(self.chat_id, "system", self.system)
        return self.chat_id

    def add_user(self, text: str) -> None:
        self.store.add_message(self._ensure_chat(), "user", text)
        self.messages.append(ChatMessage("user", text))

    def start_reply(self) -> None:
        self._reply_id = self.store.add_message(self._ensure_chat(), "assistant", "", complete=False)
        self._last_save = time.monotonic()

    def save_partial(self, text: str) -> bool:
        """Rewrite the reply in progress if the last save is a few seconds old."""
        if self._reply_id is None or time.monotonic() - self._last_save < PARTIAL_SAVE_SECONDS:
            return False
        self.store.update_message(self._reply_id, text, complete=False)
        self._last_save = time.monotonic()
        return True

    def finish_reply(self, text: str, stats: dict[str, Any]) -> None:
        if self._reply_id is not None:
            self.store.update_message(self._reply_id, text, complete=True, stats=stats)
        self._reply_id = None
        self.messages.append(ChatMessage("assistant", text))

    @property
    def last_user_index(self) -> int | None:
        """Index in `messages` of the last user turn (the prompt a comparison re-runs)."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index].role == "user":
                return index
        return None
