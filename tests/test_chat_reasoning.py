"""Reasoning told apart from the answer on the text side, and handed back as the template wants.

Scripted text as llama.cpp streams it: Qwen3's think tags in pieces cut anywhere, a block the
template opened in the prompt, and gpt-oss's harmony channels (`<|channel|>`, `<|message|>`,
`<|start|>` rendered as text, `<|end|>` as nothing).
"""

from __future__ import annotations

import pytest
from scripted_gguf import KEEPING_TEMPLATE, OPENING_TEMPLATE, QWEN3_LIKE_TEMPLATE

from spectui.chat.reasoning import (
    HARMONY,
    THINK_TAGS,
    ReasoningSplitter,
    count_tokens_through,
    markers_for,
    reasoning_key,
    split_text,
    thinking_switch,
)
from spectui.chat.template import ChatFormat, ChatMessage, PromptStyle

QWEN3_REPLY = "<think>\nThe user asks about gears.\n</think>\n\nA bicycle has **gears**."
HARMONY_REPLY = ("<|channel|>analysis<|message|>User wants a number. Answer 4."
                 "<|start|>assistant<|channel|>final<|message|>Four.")
GPT_OSS_TEMPLATE_PART = (
    "{%- if message.role == 'assistant' %}{%- if 'thinking' in message %}...{%- endif %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|end|>' }}{%- endif %}"
    "{{- '<|start|>system<|message|>Reasoning: ' + reasoning_effort + '<|end|>' }}"
)
DEEPSEEK_TEMPLATE_PART = "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"


def stream(splitter: ReasoningSplitter, text: str, size: int) -> list[tuple[str, str]]:
    """Feed `text` in pieces of `size` characters; merge what comes out by kind."""
    out: list[tuple[str, str]] = []
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    for segment in [s for p in pieces for s in splitter.feed(p)] + splitter.flush():
        if out and out[-1][0] == segment[0]:
            out[-1] = (segment[0], out[-1][1] + segment[1])
        else:
            out.append(segment)
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 100])
def test_think_tags_are_split_wherever_the_pieces_are_cut(size: int) -> None:
    segments = stream(ReasoningSplitter(THINK_TAGS), QWEN3_REPLY, size)
    assert segments == [("reasoning", "\nThe user asks about gears.\n"), ("answer", "\n\nA bicycle has **gears**.")]


def test_a_marker_is_held_back_until_it_completes_or_cannot() -> None:
    splitter = ReasoningSplitter(THINK_TAGS)
    assert splitter.feed("2 <") == [("answer", "2 ")]  # "<" may start "<think>"
    assert splitter.feed("3 is true") == [("answer", "<3 is true")]  # it did not
    assert splitter.feed("<thi") == []
    assert splitter.feed("nk>hmm") == [("reasoning", "hmm")]


def test_a_reply_that_starts_inside_a_block_the_prompt_opened() -> None:
    split = split_text("Counting.\n</think>\n\nFour.", THINK_TAGS, starts_in_reasoning=True)
    assert (split.reasoning, split.answer) == ("Counting.", "\n\nFour.")
    assert split.reasoning_end == len("Counting.\n</think>")


def test_without_markers_or_reasoning_everything_is_the_answer() -> None:
    assert split_text("<think>x</think>y", None).answer == "<think>x</think>y"
    plain = split_text("Just an answer.", THINK_TAGS)
    assert (plain.reasoning, plain.answer, plain.reasoning_end) == ("", "Just an answer.", 0)


def test_a_reply_cut_while_thinking_is_all_reasoning() -> None:
    split = split_text("<think>Still going", THINK_TAGS)
    assert (split.reasoning, split.answer) == ("Still going", "")
    assert split.reasoning_end == len("<think>Still going")


@pytest.mark.parametrize("size", [1, 4, 100])
def test_gpt_oss_channels_as_llama_cpp_renders_them(size: int) -> None:
    segments = stream(ReasoningSplitter(HARMONY), HARMONY_REPLY, size)
    assert segments == [("reasoning", "User wants a number. Answer 4."), ("answer", "Four.")]


def test_markers_and_switches_are_read_from_the_template_source() -> None:
    assert markers_for(QWEN3_LIKE_TEMPLATE) is THINK_TAGS and markers_for(None) is THINK_TAGS
    assert markers_for(GPT_OSS_TEMPLATE_PART) is HARMONY
    assert thinking_switch(QWEN3_LIKE_TEMPLATE) == "enable_thinking"
    assert thinking_switch(GPT_OSS_TEMPLATE_PART) == "reasoning_effort"
    assert thinking_switch(KEEPING_TEMPLATE) is None and thinking_switch(None) is None
    assert reasoning_key(QWEN3_LIKE_TEMPLATE) == "reasoning_content"
    assert reasoning_key(GPT_OSS_TEMPLATE_PART) == "thinking"
    assert reasoning_key(DEEPSEEK_TEMPLATE_PART) == "inline"
    assert reasoning_key("{{ message.content }}") == "none"


def test_a_message_gives_its_reasoning_the_way_the_template_reads_it() -> None:
    reply = ChatMessage("assistant", "Four.", "Count them.")
    assert reply.as_dict("reasoning_content") == {"role": "assistant", "content": "Four.",
                                                  "reasoning_content": "Count them."}
    assert reply.as_dict("thinking")["thinking"] == "Count them."
    assert reply.as_dict("inline", THINK_TAGS)["content"] == "<think>\nCount them.\n</think>\n\nFour."
    assert reply.as_dict("none") == {"role": "assistant", "content": "Four."}
    assert ChatMessage("user", "Hi").as_dict("reasoning_content") == {"role": "user", "content": "Hi"}


class Model:
    """What `ChatFormat.from_model` reads, without loading anything."""

    def __init__(self, template: str | None) -> None:
        self.chat_template, self.bos_id, self.eos_id = template, -1, -1

    def token_text(self, token: int) -> str:
        return ""


TURNS = [ChatMessage("user", "How many?"), ChatMessage("assistant", "Four gears!", "Let me count."),
         ChatMessage("user", "Sure?")]


def test_qwen3_style_template_drops_earlier_reasoning_and_takes_enable_thinking() -> None:
    chat = ChatFormat.from_model(Model(QWEN3_LIKE_TEMPLATE))
    earlier = chat.render(TURNS)
    assert "Four gears!" in earlier and "Let me count" not in earlier
    latest = chat.render(TURNS[:2], add_generation_prompt=False)  # the reply after the last question
    assert "<think>\nLet me count.\n</think>\n\nFour gears!" in latest
    off = chat.render(TURNS[:1], style=PromptStyle(thinking=False))
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert chat.render(TURNS[:1], style=PromptStyle(thinking=True)).endswith("<|im_start|>assistant\n")
    assert not chat.opens_reasoning(TURNS[:1]) and not chat.opens_reasoning(TURNS[:1], PromptStyle(thinking=False))


def test_a_template_that_keeps_reasoning_gets_it_and_one_that_opens_the_block_is_seen() -> None:
    keeping = ChatFormat.from_model(Model(KEEPING_TEMPLATE))
    assert "<think>Let me count.</think>Four gears!" in keeping.render(TURNS)
    opening = ChatFormat.from_model(Model(OPENING_TEMPLATE))
    assert opening.opens_reasoning(TURNS[:1])
    assert opening.switched("completion").markers is None  # a continuation is never split


def test_thinking_tokens_are_counted_on_the_tokens_that_wrote_them() -> None:
    text = "<think>ab</think>cd"
    tokens = [b"<think>", b"a", b"b", b"</think>", b"c", b"d"]
    assert count_tokens_through(tokens, text, split_text(text, THINK_TAGS).reasoning_end) == 4
    accents = "é</think>x"  # characters, not bytes, in the text; bytes in the tokens
    assert count_tokens_through([b"\xc3", b"\xa9", b"</think>", b"x"], accents,
                                split_text(accents, THINK_TAGS, True).reasoning_end) == 3


def test_a_gpt_oss_style_template_gets_the_reasoning_effort_and_earlier_thinking_as_it_asks() -> None:
    template = ("{{- '<|start|>system<|message|>Reasoning: ' + reasoning_effort + '<|end|>' }}"
                "{%- for message in messages %}{%- if message.role == 'assistant' and 'thinking' in message %}"
                "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.thinking + '<|end|>' }}{%- endif %}"
                "{{- '<|start|>' + message.role + '<|channel|>final<|message|>' + message.content + '<|end|>' }}"
                "{%- endfor %}{%- if add_generation_prompt %}<|start|>assistant{%- endif %}")
    chat = ChatFormat.from_model(Model(template))
    assert chat.markers is HARMONY and chat.thinking_switch == "reasoning_effort" and chat.reasoning_key == "thinking"
    rendered = chat.render(TURNS, style=PromptStyle(reasoning_effort="high"))
    assert rendered.startswith("<|start|>system<|message|>Reasoning: high<|end|>")
    assert "<|channel|>analysis<|message|>Let me count.<|end|>" in rendered
    assert not chat.opens_reasoning(TURNS)
