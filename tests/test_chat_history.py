"""A chat's settings, mode, models and reasoning in the store; replaced turns; old stores migrated."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from chat_stores import VERSION_1_FILLER, overwrite_page, page_holding, version_1_store
from pydantic import ValidationError

from spectui import limits
from spectui.chat.chat_settings import ChatSettings
from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.chat.store import COLUMNS, SCHEMA_VERSION, ChatStore
from spectui.chat.template import ChatMessage
from spectui.engine.generation_config import LLAMA_CPP_SAMPLING, RecommendedSampling
from spectui.session.figures import ReplyFigures


def test_settings_are_checked_against_the_shared_limits_and_default_to_the_models_sampling() -> None:
    defaults = ChatSettings()
    assert defaults.sampling() == LLAMA_CPP_SAMPLING  # no recommendation known: llama.cpp's defaults
    qwen_like = RecommendedSampling(replace(LLAMA_CPP_SAMPLING, temperature=0.6, top_k=20), ("temperature", "top_k"))
    assert defaults.sampling(qwen_like) == qwen_like.sampling
    assert ChatSettings(temperature=0.0).sampling(qwen_like).greedy  # greedy is one setting away
    for bad in ({"temperature": limits.MAX_TEMPERATURE + 1}, {"top_p": 1.5}, {"min_p": -0.1},
                {"top_k": limits.MAX_TOP_K + 1}, {"seed": limits.MAX_SEED + 1}, {"max_tokens": 0},
                {"temperature": float("nan")}, {"stray": 1}):
        with pytest.raises(ValidationError):
            ChatSettings(**bad)
    assert ChatSettings(temperature=0.8, top_p=0.95, seed=7).describe() == \
        "T=0.8 top-p 0.95 top-k 40 min-p 0.05 · seed 7"
    assert defaults.describe(qwen_like) == "T=0.6 top-p 0.95 top-k 20 min-p 0.05 (the model's) · seed random"
    assert defaults.describe(RecommendedSampling()) == \
        "T=0.8 top-p 0.95 top-k 40 min-p 0.05 (llama.cpp's defaults) · seed random"
    assert ChatSettings(temperature=0, max_tokens=64).describe() == "T=0 (greedy) · max 64 tok"


def test_stored_settings_keep_what_is_valid_and_fall_back_for_the_rest() -> None:
    base = ChatSettings(temperature=0.5)
    restored = ChatSettings.from_stored({"top_k": 12, "top_p": "lots", "min_p": 7, "from_the_future": 1}, base)
    assert (restored.top_k, restored.top_p, restored.min_p, restored.temperature) == (12, None, None, 0.5)
    assert ChatSettings.from_stored("not a dict", base) == base
    # a chat saved before sampling followed the model kept its explicit values
    assert ChatSettings.from_stored({"temperature": 0.0, "top_k": 40}).sampling().greedy


def test_a_version_1_store_gains_the_new_columns_and_keeps_its_chats(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    version_1_store(path)
    store = ChatStore(path)
    store.check()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    for table, columns in COLUMNS.items():
        assert tuple(r[1] for r in db.execute(f"PRAGMA table_info({table})")) == columns
    [old] = store.messages(1)[:1]
    assert old.content.startswith("chat 1 message 0") and old.reasoning == "" and old.stats == {"tokens": 3}
    info = store.chat_info(1)
    assert info is not None and (info.title, info.pair, info.settings, info.mode, info.models) == \
        ("old chat 1", "demo", {}, "", {})
    reopened = Conversation.open(store, 1, ChatSettings(temperature=0.3))
    assert reopened.settings.temperature == 0.3  # what the old chat did not save comes from the base


def test_a_damaged_version_1_store_is_salvaged_whole_but_for_the_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    version_1_store(path, n_chats=3, n_messages=30)
    overwrite_page(path, page_holding(path, b"chat 1 message 12 "))
    store = SafeStore(path)
    [(line, _)] = store.notices
    assert "the chat store was damaged" in line
    assert [m.content for m in store.messages(3)] == [f"chat 3 message {m} {VERSION_1_FILLER}" for m in range(30)]
    assert store.chat_info(3) is not None and store.chat_info(3).title == "old chat 3"


def test_settings_mode_models_and_reasoning_are_saved_and_reopened(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    chat = Conversation(store, "tiny", "Be brief.", ChatSettings(temperature=0.7, seed=3))
    chat.update(mode="completion", models={"pair": "tiny", "target": "/m/t.gguf", "draft": None})
    assert store.list_chats() == []  # still no row before the first message
    chat.add_user("How many gears?")
    chat.start_reply()
    chat.finish_reply("Four.", ReplyFigures(reason="eos", tokens=9, thinking_tokens=6), "Let me count.")
    chat.update(settings=ChatSettings(temperature=0.2, top_k=5))
    assert chat.chat_id is not None
    again = Conversation.open(store, chat.chat_id)
    assert again.settings == ChatSettings(temperature=0.2, top_k=5)
    assert again.mode == "completion" and again.models["target"] == "/m/t.gguf"
    assert again.messages[1] == ChatMessage("assistant", "Four.", "Let me count.")
    assert again.stats(1)["thinking_tokens"] == 6


def test_the_system_prompt_can_change_and_go_mid_chat(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    chat = Conversation(store, "tiny")
    chat.add_user("Hi")
    chat.update(system="Answer in French.")
    assert chat.chat_id is not None
    assert Conversation.open(store, chat.chat_id).system == "Answer in French."
    chat.update(system="Answer in German.")
    assert [m.content for m in store.messages(chat.chat_id) if m.role == "system"] == ["Answer in German."]
    chat.update(system="")
    assert Conversation.open(store, chat.chat_id).system is None
    assert [m.role for m in store.messages(chat.chat_id)] == ["user"]


def test_truncating_replaces_the_turn_and_what_followed_it_on_disk(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "c.db")
    chat = Conversation(store, "tiny", "Be brief.")
    for question in ("one", "two"):
        chat.add_user(question)
        chat.start_reply()
        chat.finish_reply(f"answer {question}", ReplyFigures(reason="eos", tokens=2))
    assert chat.chat_id is not None
    ids = [m.id for m in store.messages(chat.chat_id)]
    chat.truncate(3)  # regenerate: the last reply goes
    assert [m.content for m in store.messages(chat.chat_id)] == ["Be brief.", "one", "answer one", "two"]
    chat.start_reply()
    chat.finish_reply("answer two, again", ReplyFigures(reason="eos", tokens=3))
    rows = store.messages(chat.chat_id)
    assert rows[-1].content == "answer two, again" and len(rows) == len(ids)
    chat.truncate(2)  # edit the second question: it and its reply go
    chat.add_user("two, edited")
    assert [m.content for m in store.messages(chat.chat_id)][1:] == ["one", "answer one", "two, edited"]
    assert chat.messages == Conversation.open(store, chat.chat_id).messages


def test_a_delete_that_fails_leaves_no_stale_rows_once_writing_works(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = SafeStore(path)
    chat = Conversation(store, "tiny")
    chat.add_user("one")
    chat.start_reply()
    chat.finish_reply("answer one", ReplyFigures(reason="eos"))
    real = store._store
    store._store = ChatStore(None)  # a store that has none of these rows: the delete "fails"
    store._store.delete_messages = lambda *a: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))
    chat.truncate(1)
    store._store = real
    chat.start_reply()
    chat.finish_reply("answer one, again", ReplyFigures(reason="eos"))
    [summary] = store.list_chats()
    assert [m.content for m in store.messages(summary.id)] == ["one", "answer one, again"]
