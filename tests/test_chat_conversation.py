"""The open conversation mirrors every message into the store as it happens."""

from __future__ import annotations

from pathlib import Path

import pytest

from spectui.chat import conversation as conversation_module
from spectui.chat.conversation import Conversation
from spectui.chat.store import ChatStore
from spectui.chat.template import ChatMessage
from spectui.session.figures import ReplyFigures


def test_no_chat_row_until_the_first_message(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    Conversation(store, "tiny", system="Be brief.")
    assert store.list_chats() == []


def test_reply_is_saved_while_streaming_and_completed_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ChatStore(tmp_path / "c.db")
    chat = Conversation(store, "tiny", system="Be brief.")
    chat.add_user("Hi")
    chat.start_reply()
    assert not chat.save_partial("Hel")  # too soon after the last save
    monkeypatch.setattr(conversation_module, "PARTIAL_SAVE_SECONDS", 0.0)
    assert chat.save_partial("Hello, wor")
    assert chat.chat_id is not None
    rows = store.messages(chat.chat_id)
    assert [(m.role, m.content, m.complete) for m in rows] == [
        ("system", "Be brief.", True), ("user", "Hi", True), ("assistant", "Hello, wor", False)
    ]
    chat.finish_reply("Hello, world", ReplyFigures(reason="eos", tokens=3))
    assert store.messages(chat.chat_id)[-1].complete
    assert ReplyFigures.from_stored(store.messages(chat.chat_id)[-1].stats) == ReplyFigures(reason="eos", tokens=3)
    assert not chat.save_partial("late")  # no reply in progress any more


def test_reopened_chat_rebuilds_the_prompt(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    chat = Conversation(store, "tiny", system="Be brief.")
    chat.add_user("Hi")
    chat.start_reply()
    chat.finish_reply("Hello", ReplyFigures(reason="eos"))
    chat.add_user("Again")
    assert chat.chat_id is not None
    reopened = Conversation.open(store, chat.chat_id)
    assert reopened.system == "Be brief." and reopened.pair == "tiny"
    assert reopened.prompt_messages() == [
        ChatMessage("system", "Be brief."), ChatMessage("user", "Hi"),
        ChatMessage("assistant", "Hello"), ChatMessage("user", "Again"),
    ]
    assert reopened.last_user_index == 2
    assert reopened.prompt_messages(upto=1) == [ChatMessage("system", "Be brief."),
                                                ChatMessage("user", "Hi")]
