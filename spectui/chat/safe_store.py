"""The chat store as the app uses it: it never raises, never takes the app down, never loses a chat.

- A store that is not a database, fails SQLite's quick check, or raises a "malformed"/"not a
  database" error at any point is replaced (`spectui.chat.repair`): its readable chats are
  salvaged into a fresh store built beside it, and once that one is whole the old file is moved
  aside (`chats.sqlite3.damaged-YYYYMMDD-HHMMSS`, with its -wal/-shm); one line says so and where
  the old file is. When no whole copy can be written (a full disk), the old file stays where it
  is and the chat runs in memory, showing what can still be read.
- A directory that cannot be written (read-only mount, a file in the way) gives an in-memory
  store: the chat runs unsaved (past chats that can still be read are shown), and one line names
  the directory and `SPECTUI_HOME`.
- A write that fails (disk full, locked, read-only) is retried once; if it fails again, one line
  says what could not be saved, and `Conversation` writes the whole chat again at its next write.

Every line goes to `report(line, severity)` once one is attached (the app: a note in the log and
a notification), and stays in `notices` (`spectui chat` repeats them on stderr when it ends).
`generation` grows each time the file is replaced, so a `Conversation` knows its ids may be
stale and writes itself again.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from spectui.chat.repair import RepairFailed, repair
from spectui.chat.salvage import Salvaged, is_damage, salvage
from spectui.chat.store import ChatInfo, ChatStore, ChatSummary, StoredMessage
from spectui.errors import StorageError

Report = Callable[[str, str], None]
"""Receives one line and its severity: "information", "warning" or "error"."""
T = TypeVar("T")
RETRY_PAUSE = 0.05


class SafeStore:
    """`ChatStore`'s methods, guarded: reads return an empty answer and writes None/False on
    failure, after saying why."""

    def __init__(self, path: Path, report: Report | None = None) -> None:
        self.path = path
        self.notices: list[tuple[str, str]] = []
        self.generation = 0
        self._report = report
        self._pending: list[tuple[str, str]] = []
        self._failing = False
        self._store = self._open()

    # ----- reporting ---------------------------------------------------------------------------

    def attach(self, report: Report) -> None:
        """Send lines to `report` from now on, starting with those said before it was attached."""
        self._report = report
        pending, self._pending = self._pending, []
        for line, severity in pending:
            report(line, severity)

    def _say(self, line: str, severity: str = "warning") -> None:
        self.notices.append((line, severity))
        if self._report is None:
            self._pending.append((line, severity))
        else:
            self._report(line, severity)

    @property
    def saving(self) -> bool:
        return self._store.saving

    # ----- opening -----------------------------------------------------------------------------

    def _open(self) -> ChatStore:
        from spectui import paths

        try:
            paths.writable_dir(self.path.parent)
        except StorageError as error:
            return self._in_memory(f"this chat runs unsaved: {error}")
        try:
            return self._open_file()
        except (sqlite3.Error, OSError) as error:
            if isinstance(error, sqlite3.Error) and is_damage(error):
                return self._replace_damaged(error)
            return self._in_memory(f"this chat runs unsaved: {self.path} cannot be opened ({error}); "
                                   "choose another directory: SPECTUI_HOME=/some/dir spectui ...")

    def _open_file(self) -> ChatStore:
        store = ChatStore(self.path)
        try:
            store.check()
        except BaseException:
            store.close()
            raise
        return store

    def _in_memory(self, line: str) -> ChatStore:
        """A store in memory, holding whatever can still be read from the file."""
        store = ChatStore(None)
        found = _salvage_into(self.path, store) if self.path.is_file() else Salvaged(0, 0)
        if found.chats:
            chats = "1 past chat" if found.chats == 1 else f"{found.chats} past chats"
            line += f"; {chats} can still be read (ctrl+o)"
        self._say(line)
        return store

    def _replace_damaged(self, error: sqlite3.Error) -> ChatStore:
        """Replace the damaged file with a repaired one (`spectui.chat.repair`: the damaged one is
        moved aside only once the new one is whole), and say so in one line; when no repaired copy
        can be written (a full disk), leave the file as it is and run in memory."""
        try:
            repaired = repair(self.path)
        except RepairFailed as failure:
            return self._in_memory(f"this chat runs unsaved: the chat store {self.path} is damaged ({error}) and "
                                   f"a repaired copy cannot be written ({failure}), so it was left as it is")
        found = repaired.found
        try:
            store, tail = ChatStore(self.path), f" into a fresh {self.path.name}" if found.messages else ""
        except (sqlite3.Error, OSError) as new_error:
            store = ChatStore(None)
            found = _salvage_into(repaired.aside, store)
            tail = f"; the repaired store cannot be opened ({new_error}): this chat runs unsaved"
        self._say(f"the chat store was damaged ({error}): it was moved to {repaired.aside}; {found.describe()}{tail}")
        return store

    def _recover(self, error: sqlite3.Error) -> None:
        """Damage found while running: replace the file and tell conversations to rewrite."""
        with contextlib.suppress(sqlite3.Error):
            self._store.close()
        self._store = self._replace_damaged(error) if self._store.saving else self._in_memory_again()
        self.generation += 1

    def _in_memory_again(self) -> ChatStore:
        self._say("the in-memory chat store failed; starting an empty one (this chat runs unsaved)")
        return ChatStore(None)

    # ----- guarded calls -----------------------------------------------------------------------

    def _run(self, call: Callable[[ChatStore], T], default: T, what: str, *, write: bool = False) -> T:
        """`call(store)`, retried once. Damage is repaired first; a write is then not retried,
        since its ids belong to the old file: `generation` tells the conversation to write
        itself again, whole."""
        last: sqlite3.Error | None = None
        for attempt in (1, 2):
            try:
                result = call(self._store)
            except sqlite3.Error as error:
                last = error
                if attempt == 1:
                    if is_damage(error):
                        self._recover(error)
                        if write:
                            return default
                    else:
                        time.sleep(RETRY_PAUSE)
                continue
            if self._failing:
                self._failing = False
                self._say(f"chats are being saved again in {self.path}", "information")
            return result
        if not self._failing:
            self._failing = True
            self._say(f"could not {what} in {self.path} ({last}), even after a retry; it stays on "
                      "screen, and the whole chat is saved again with the next message", "error")
        return default

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._store.close()

    def last_chat_id(self) -> int | None:
        return self._run(lambda s: s.last_chat_id(), None, "read the last chat")

    def list_chats(self, limit: int = 100) -> list[ChatSummary]:
        return self._run(lambda s: s.list_chats(limit), [], "list the saved chats")

    def chat_pair(self, chat_id: int) -> str:
        return self._run(lambda s: s.chat_pair(chat_id), "", "read the chat")

    def messages(self, chat_id: int) -> list[StoredMessage]:
        return self._run(lambda s: s.messages(chat_id), [], "read the chat's messages")

    def chat_info(self, chat_id: int) -> ChatInfo | None:
        return self._run(lambda s: s.chat_info(chat_id), None, "read the chat")

    def update_chat(self, chat_id: int, *, pair: str | None = None, settings: dict[str, Any] | None = None,
                    mode: str | None = None, models: dict[str, Any] | None = None) -> bool:
        return self._run(lambda s: s.update_chat(chat_id, pair=pair, settings=settings, mode=mode, models=models),
                         False, "save the chat's settings", write=True)

    def delete_messages(self, chat_id: int, message_ids: Sequence[int]) -> bool:
        return self._run(lambda s: s.delete_messages(chat_id, message_ids), False,
                         "remove the replaced messages", write=True)

    def new_chat(self, pair: str = "") -> int | None:
        return self._run(lambda s: s.new_chat(pair), None, "save the new chat", write=True)

    def delete_chat(self, chat_id: int) -> bool:
        return self._run(lambda s: s.delete_chat(chat_id), False, "delete the chat", write=True)

    def add_message(self, chat_id: int, role: str, content: str, *, complete: bool = True,
                    stats: dict[str, Any] | None = None, reasoning: str = "") -> int | None:
        what = {"user": "save your message", "assistant": "save the reply"}.get(role, "save the system prompt")
        return self._run(lambda s: s.add_message(chat_id, role, content, complete=complete, stats=stats,
                                                 reasoning=reasoning),
                         None, what, write=True)

    def update_message(self, message_id: int, content: str, *, complete: bool,
                       stats: dict[str, Any] | None = None, reasoning: str | None = None) -> bool:
        what = "save the reply" if complete else "save the reply in progress"
        return self._run(lambda s: s.update_message(message_id, content, complete=complete, stats=stats,
                                                    reasoning=reasoning),
                         False, what, write=True)


def _salvage_into(source: Path, store: ChatStore) -> Salvaged:
    """Salvage, or nothing when even writing the salvaged rows fails (e.g. a full disk)."""
    try:
        return salvage(source, store)
    except sqlite3.Error:
        return Salvaged(0, 0)
