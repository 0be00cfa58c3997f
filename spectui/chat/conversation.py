"""The open chat: its messages and settings in memory, mirrored into the store as they happen.

A user message is saved when sent; a reply is saved as an incomplete row when it starts,
rewritten every few seconds while it streams, and marked complete with its stats (and the
reasoning apart from the answer) at the end. The database row for a chat is created with its
first message, so opening the app and quitting leaves no empty chats behind; the chat's
settings, mode and models are written with it and again whenever they change.

Editing the last message or regenerating the last reply replaces that turn: `truncate` drops
it and everything after it, on screen and on disk, in one statement, so the chat never holds a
half-replaced turn (the old version is not kept).

The messages in memory are the truth. With a `SafeStore` a write can fail (it then returns
None/False and has told the user); the conversation remembers what of itself is on disk and
writes the rest at its next write. When the store's file was replaced (a damaged store moved
aside and salvaged), or rows it meant to delete could not be, what is on disk is stale: it
deletes its copy and writes itself again, whole.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from spectui.chat.chat_settings import ChatSettings
from spectui.chat.store import ChatInfo, ChatSummary, StoredMessage
from spectui.chat.template import ChatMessage

PARTIAL_SAVE_SECONDS = 2.0


class StoredFigures(Protocol):
    """A reply's figures as the store keeps them (`session.figures.ReplyFigures`)."""

    def stored(self) -> dict[str, Any]: ...


class Store(Protocol):
    """What a conversation needs from `ChatStore` (raises) or `SafeStore` (returns None/False)."""

    generation: int

    def new_chat(self, pair: str = "") -> int | None: ...
    def chat_pair(self, chat_id: int) -> str: ...
    def chat_info(self, chat_id: int) -> ChatInfo | None: ...
    def update_chat(self, chat_id: int, *, pair: str | None = None, settings: dict[str, Any] | None = None,
                    mode: str | None = None, models: dict[str, Any] | None = None) -> bool: ...
    def delete_chat(self, chat_id: int) -> bool: ...
    def list_chats(self, limit: int = 100) -> list[ChatSummary]: ...
    def messages(self, chat_id: int) -> list[StoredMessage]: ...
    def add_message(self, chat_id: int, role: str, content: str, *, complete: bool = True,
                    stats: dict[str, Any] | None = None, reasoning: str = "") -> int | None: ...
    def update_message(self, message_id: int, content: str, *, complete: bool,
                       stats: dict[str, Any] | None = None, reasoning: str | None = None) -> bool: ...
    def delete_messages(self, chat_id: int, message_ids: Sequence[int]) -> bool: ...


class Conversation:
    def __init__(self, store: Store, pair: str = "", system: str | None = None,
                 settings: ChatSettings | None = None) -> None:
        self.store = store
        self.pair = pair
        self.system = system or None
        self.settings = settings or ChatSettings()
        """How this chat's replies are sampled (saved with it)."""
        self.chat_id: int | None = None
        self.mode = ""
        """How the model reads this chat: `chat`, `completion` (text continued) or `plain-chat`;
        empty until a model has read it."""
        self.models: dict[str, Any] = {}
        """The models it runs with (pair, target, draft, drafter): what `--resume` reopens it with."""
        self.messages: list[ChatMessage] = []
        self.stored: list[StoredMessage] = []
        """What was loaded from the store when the chat was reopened (with stats, completeness)."""
        self._interrupted: set[int] = set()
        """Indexes of replies saved before they finished (a crash), as reopened."""
        self._stats: dict[int, dict[str, Any]] = {}
        """Stats of finished replies by their index in `messages` (written again after a loss)."""
        self._ids: list[int] = []
        """Store ids of the first len(_ids) messages: those are on disk."""
        self._system_id: int | None = None
        self._system_saved: str | None = None
        self._info_saved = False
        """Pair, settings, mode and models are on disk as they are now."""
        self._stale = False
        """Rows that should be gone may still be on disk: write the chat again, whole."""
        self._generation = store.generation
        self._replying = False
        self._reply_text = ""
        self._reply_reasoning = ""
        self._reply_id: int | None = None
        """The row of the reply in progress, or of a finished one whose final text is not saved."""
        self._last_save = 0.0

    @classmethod
    def open(cls, store: Store, chat_id: int, base: ChatSettings | None = None) -> Conversation:
        """A stored chat; settings it lacks (saved by an older version) are `base`'s."""
        info = store.chat_info(chat_id)
        conversation = cls(store, info.pair if info else store.chat_pair(chat_id))
        if info is not None:
            conversation.settings = ChatSettings.from_stored(info.settings, base)
            conversation.mode, conversation.models = info.mode, info.models
        elif base is not None:
            conversation.settings = base
        conversation.chat_id = chat_id
        conversation.stored = store.messages(chat_id)
        for message in conversation.stored:
            if message.role == "system":
                conversation.system = message.content or None
                conversation._system_id, conversation._system_saved = message.id, conversation.system
            else:
                conversation._stats[len(conversation.messages)] = message.stats
                if not message.complete:
                    conversation._interrupted.add(len(conversation.messages))
                conversation.messages.append(ChatMessage(message.role, message.content, message.reasoning))
                conversation._ids.append(message.id)
        conversation._info_saved = info is not None
        return conversation

    def prompt_messages(self, upto: int | None = None) -> list[ChatMessage]:
        """System prompt (if any) and the turns, optionally only the first `upto` of them."""
        turns = self.messages if upto is None else self.messages[:upto]
        head = [ChatMessage("system", self.system)] if self.system else []
        return head + list(turns)

    def stats(self, index: int) -> dict[str, Any]:
        """The figures saved with the reply at `index`, as stored (JSON; empty for other turns):
        read them with `ReplyFigures.from_stored`."""
        return self._stats.get(index, {})

    def interrupted(self, index: int) -> bool:
        """The reply at `index` was saved before it finished (the app ended mid-reply)."""
        return index in self._interrupted

    # ----- settings --------------------------------------------------------------------------

    def update(self, *, settings: ChatSettings | None = None, system: str | None = None,
               mode: str | None = None, pair: str | None = None, models: dict[str, Any] | None = None) -> None:
        """Change what is given (a system prompt of "" removes it); saved at once if the chat is."""
        if settings is not None and settings != self.settings:
            self.settings, self._info_saved = settings, False
        if mode is not None and mode != self.mode:
            self.mode, self._info_saved = mode, False
        if pair is not None and pair != self.pair:
            self.pair, self._info_saved = pair, False
        if models is not None and models != self.models:
            self.models, self._info_saved = models, False
        if system is not None:
            self.system = system or None
        if self.chat_id is not None:
            self._sync()

    # ----- writing -------------------------------------------------------------------------------

    def _sync(self) -> bool:
        """Write whatever is not on disk yet (everything, after the store's file was replaced),
        then the row of the reply in progress. False when a write failed (it is retried later).
        If the file is replaced during these writes, the chat is written again, whole, at once."""
        ok = self._sync_once()
        if self.store.generation != self._generation:
            ok = self._sync_once()
        return ok

    def _start_over(self) -> bool:
        """Forget what is on disk (deleting our copy of it, if it can be reached)."""
        if self.chat_id is not None and not self.store.delete_chat(self.chat_id) and self._stale:
            return False  # the rows to replace are still there: try again at the next write
        self.chat_id, self._ids, self._reply_id = None, [], None
        self._system_id, self._system_saved, self._info_saved = None, None, False
        self._generation, self._stale = self.store.generation, False
        return True

    def _sync_once(self) -> bool:
        if (self.store.generation != self._generation or self._stale) and not self._start_over():
            return False
        if self.chat_id is None:
            self.chat_id = self.store.new_chat(self.pair)
            if self.chat_id is None:
                return False
        return self._sync_info() and self._sync_system() and self._sync_turns() and self._sync_reply()

    def _sync_info(self) -> bool:
        if not self._info_saved and self.chat_id is not None:
            self._info_saved = self.store.update_chat(self.chat_id, pair=self.pair, settings=self.settings.stored(),
                                                      mode=self.mode, models=self.models)
        return self._info_saved

    def _sync_system(self) -> bool:
        if self.system == self._system_saved or self.chat_id is None:
            return True
        if self._system_id is not None and not self.system:
            if not self.store.delete_messages(self.chat_id, [self._system_id]):
                return False
            self._system_id = None
        elif self._system_id is not None:
            if not self.store.update_message(self._system_id, self.system or "", complete=True):
                return False
        else:
            self._system_id = self.store.add_message(self.chat_id, "system", self.system or "")
            if self._system_id is None:
                return False
        self._system_saved = self.system
        return True

    def _sync_turns(self) -> bool:
        assert self.chat_id is not None
        while len(self._ids) < len(self.messages):
            index = len(self._ids)
            message, stats = self.messages[index], self._stats.get(index)
            if self._reply_id is not None and message.role == "assistant":  # the reply's own row, finished
                if not self.store.update_message(self._reply_id, message.content, complete=True, stats=stats,
                                                 reasoning=message.reasoning):
                    return False
                row: int | None = self._reply_id
                self._reply_id = None
            else:
                row = self.store.add_message(self.chat_id, message.role, message.content, stats=stats,
                                             reasoning=message.reasoning)
            if row is None:
                return False
            self._ids.append(row)
        return True

    def _sync_reply(self) -> bool:
        if self._replying and self._reply_id is None and self.chat_id is not None:
            self._reply_id = self.store.add_message(self.chat_id, "assistant", self._reply_text, complete=False,
                                                    reasoning=self._reply_reasoning)
            return self._reply_id is not None
        return True

    def add_user(self, text: str) -> None:
        self.messages.append(ChatMessage("user", text))
        self._sync()

    def start_reply(self) -> None:
        self._replying, self._reply_text, self._reply_reasoning = True, "", ""
        self._sync()  # _reply_id may still name an unsaved reply's row
        self._last_save = time.monotonic()

    def save_partial(self, text: str, reasoning: str = "") -> bool:
        """Rewrite the reply in progress if the last save is a few seconds old."""
        if not self._replying or time.monotonic() - self._last_save < PARTIAL_SAVE_SECONDS:
            return False
        self._reply_text, self._reply_reasoning = text, reasoning
        self._last_save = time.monotonic()
        if not self._sync() or self._reply_id is None:
            return False
        return self.store.update_message(self._reply_id, text, complete=False, reasoning=reasoning)

    def save_interrupted(self, text: str, reasoning: str = "", stats: dict[str, Any] | None = None) -> bool:
        """Write the reply in progress now, as it stands and marked interrupted (`complete` = 0:
        reopened, it says it was saved before it finished): the app is quitting mid-reply. The
        reply stays in progress, so a later call (more text arrived) writes it again."""
        if not self._replying:
            return False
        self._reply_text, self._reply_reasoning = text, reasoning
        self._last_save = time.monotonic()
        if not self._sync() or self._reply_id is None:
            return False
        return self.store.update_message(self._reply_id, text, complete=False, stats=stats, reasoning=reasoning)

    @property
    def replying(self) -> bool:
        """A reply is in progress (started, not finished)."""
        return self._replying

    def finish_reply(self, text: str, figures: StoredFigures, reasoning: str = "") -> None:
        self._replying = False
        self._stats[len(self.messages)] = figures.stored()
        self.messages.append(ChatMessage("assistant", text, reasoning))
        self._sync()

    def truncate(self, index: int) -> None:
        """Drop the turn at `index` and every one after it (never while a reply streams)."""
        if self._replying or index >= len(self.messages):
            return
        removed = self._ids[index:]
        if self._reply_id is not None:  # a finished reply whose final text never reached the disk
            removed.append(self._reply_id)
        self.messages, self._ids, self._reply_id = self.messages[:index], self._ids[:index], None
        self._stats = {i: stats for i, stats in self._stats.items() if i < index}
        self._interrupted = {i for i in self._interrupted if i < index}
        if removed and self.chat_id is not None and not self.store.delete_messages(self.chat_id, removed):
            self._stale = True

    @property
    def last_user_index(self) -> int | None:
        """Index in `messages` of the last user turn (the prompt a comparison re-runs)."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index].role == "user":
                return index
        return None
