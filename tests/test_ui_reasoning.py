"""Reasoning replies in the app, driven through Pilot: the thinking block streams then folds, its
tokens are counted, thinking can be turned off, and earlier replies go back the way the template wants.

The replies come from `scripted_gguf`: real llama.cpp models whose weights write
`<think>Let me count.</think>\\n\\nFour gears!` (a bigram model), under Qwen3-like templates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import scripted_gguf
import tiny_gguf
from textual.widgets import Static
from ui_harness import (
    SIZE,
    ConfigApp,
    GatedApp,
    RecordingApp,
    figures_text,
    held,
    options,
    ready,
    run_async,
    send,
    shown,
    toasts,
    until,
)

from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path
from spectui.ui.chat_view import AssistantMessage

REPLY = "Four gears!"
REASONING = "Let me count."


@pytest.fixture(scope="module")
def thinking_models(tmp_path_factory: pytest.TempPathFactory) -> tiny_gguf.TinyPair:
    return scripted_gguf.write_scripted_pair(tmp_path_factory.mktemp("thinking"))


@pytest.fixture
def thinking(thinking_models: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return thinking_models


# ----- thinking --------------------------------------------------------------------------------------


@run_async
async def test_a_reasoning_reply_streams_its_thinking_then_folds_it(thinking) -> None:
    app = GatedApp(options(thinking, k=1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "How many gears?", wait=False)
        await held(pilot)
        widget = app.replies.reply_widget
        assert widget is not None
        await until(pilot, lambda: widget.reasoning.startswith("Let"), "the thinking to stream")
        block = widget.thinking
        assert block.display and not block.collapsed and block.title == "thinking…" and widget.text == ""
        assert "so far…" in figures_text(app)
        app.release()
        await until(pilot, lambda: app.replies.busy is None, "the reply")
        assert block.collapsed and block.title == "thought for 6 tokens"
        assert (widget.reasoning, widget.text.strip()) == (REASONING, REPLY)
        assert widget.figures.thinking_tokens == 6 and widget.meta.startswith("10 tokens (6 thinking)")
        assert "thinking         6 tokens" in figures_text(app)
        assert app.chat.conversation.messages[-1].reasoning == REASONING
    store = ChatStore(chats_db_path())
    reply = store.messages(store.last_chat_id())[-1]
    assert (reply.reasoning, reply.content.strip()) == (REASONING, REPLY)


@run_async
async def test_earlier_replies_go_back_the_way_a_qwen3_style_template_wants(thinking) -> None:
    app = ConfigApp(options(thinking))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "How many gears?")
        await send(pilot, "Sure?")
        chat_format = app.pair.session.chat_format
        assert chat_format is not None and chat_format.reasoning_key == "reasoning_content"
        second_prompt = chat_format.render(app.chat.conversation.prompt_messages(3), style=app.requests[-1].style)
        assert REPLY in second_prompt and REASONING not in second_prompt


@run_async
async def test_a_template_that_keeps_reasoning_gets_it_back(tmp_path: Path, spectui_home: Path) -> None:
    keeping = scripted_gguf.write_scripted_pair(tmp_path / "keeping", template=scripted_gguf.KEEPING_TEMPLATE)
    app = ConfigApp(options(keeping))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "How many gears?")
        await send(pilot, "Sure?")
        prompt = app.pair.session.chat_format.render(app.chat.conversation.prompt_messages(3))
        assert f"<think>{REASONING}</think>\n\n{REPLY}" in prompt


@run_async
async def test_a_think_block_opened_by_the_template_is_thinking_from_the_first_token(
        tmp_path: Path, spectui_home: Path) -> None:
    opening = scripted_gguf.write_scripted_pair(tmp_path / "opening", scripted_gguf.OPENED_SCRIPT,
                                                scripted_gguf.OPENING_TEMPLATE)
    app = RecordingApp(options(opening))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "How many gears?")
        reply = app.query_one(AssistantMessage)
        assert (reply.reasoning, reply.text.strip()) == (REASONING, REPLY)
        assert reply.figures.thinking_tokens == 5  # Let, me, count, ., </think>


@run_async
async def test_ctrl_t_turns_thinking_off_where_the_template_takes_enable_thinking(thinking, tiny_pair) -> None:
    app = ConfigApp(options(thinking))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert shown(app.query_one("#settings-line", Static)).endswith("thinking on")
        await pilot.press("ctrl+t")
        assert not app.chat.conversation.settings.thinking
        assert shown(app.query_one("#settings-line", Static)).endswith("thinking off")
        await send(pilot, "How many gears?")
        style = app.requests[-1].style
        assert style is not None and not style.thinking
        prompt = app.pair.session.chat_format.render(app.chat.conversation.prompt_messages(1), style=style)
        assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        await pilot.press("ctrl+t")
        assert app.chat.conversation.settings.thinking
    plain = RecordingApp(options(tiny_pair))
    async with plain.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+t")
        assert "no thinking switch" in toasts(plain) and plain.chat.conversation.settings.thinking
