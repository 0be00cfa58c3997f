"""Turn a conversation into the prompt text a model expects.

The chat template comes from the GGUF metadata (`tokenizer.chat_template`, a Hugging Face Jinja
template) and is rendered in a sandboxed Jinja environment with the helpers those templates use
(`raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text). A model without a
template is a base model: it opens in completion mode, where the reply continues the user's text
(a plain `User:` / `Assistant:` frame is there for a chat model whose GGUF lost its template).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any, Literal, Protocol

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from spectui.chat import reasoning
from spectui.chat.reasoning import Markers, ReasoningKey
from spectui.errors import SpectuiError

ROLES = ("system", "user", "assistant")
FALLBACK_LABELS = {"system": "System", "user": "User", "assistant": "Assistant"}


class ChatTemplateError(SpectuiError):
    """The model's chat template failed to render."""


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str
    """For a reply: its answer, without the reasoning."""
    reasoning: str = ""
    """For a reply of a reasoning model: what it thought before answering."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """For a reply that called tools: OpenAI's `tool_calls`, arguments as objects (what templates
    iterate over; `chat.tool_calls`)."""
    tool_call_id: str = ""
    """For a `tool` message: the call it answers."""
    name: str = ""
    """For a `tool` message: the function that answered."""

    def as_dict(self, key: ReasoningKey = "none", markers: Markers | None = None) -> dict[str, Any]:
        """The message as a template reads it, its reasoning given the way `key` says."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        if self.name:
            message["name"] = self.name
        if not self.reasoning or self.role != "assistant" or key == "none":
            return message
        if key == "inline" and markers is not None:
            message["content"] = f"{markers.open_tag}\n{self.reasoning}\n{markers.close_tag}\n\n{self.content}"
        elif key != "inline":
            message[key] = self.reasoning
        return message


@dataclass(frozen=True)
class PromptStyle:
    """How one reply's prompt is made, beyond the messages (the chat's mode and thinking)."""

    mode: str = ""
    """`chat`, `completion` or `plain-chat`; empty: the loaded model's own."""
    thinking: bool = True
    """`enable_thinking`, for templates that take it."""
    reasoning_effort: str = "medium"
    """`reasoning_effort`, for templates that take it (gpt-oss)."""
    tools: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    """OpenAI's `tools` (`{"type": "function", "function": {...}}`), given to the template as its
    `tools` variable; empty: the variable is left undefined, as without tools."""
    add_generation_prompt: bool = True
    """False: the prompt ends with the last message, without the template's opening of a reply."""
    continue_final: Literal["", "content", "reasoning"] = ""
    """Continue the last message (an assistant's) instead of opening a new turn: its `content`
    (after its reasoning, closed), or its `reasoning` (still open), as llama.cpp renders a
    `continue_final_message` (`prompt_text`)."""


class TemplateSource(Protocol):
    """What the format reads from a loaded model (a `LlamaModel`)."""

    @property
    def chat_template(self) -> str | None: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    def token_text(self, token: int) -> str: ...


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def sandboxed_environment() -> ImmutableSandboxedEnvironment:
    """The Jinja environment Hugging Face renders chat templates in, sandboxed."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env


FormatMode = Literal["chat", "completion", "plain-chat"]
"""`chat`: the GGUF's own template; `completion`: a base model continues the text (no template);
`plain-chat`: a `User:`/`Assistant:` frame for a chat model whose GGUF lost its template."""


@dataclass(frozen=True)
class ChatFormat:
    """How messages become prompt text for one model."""

    template: str | None
    bos_token: str = ""
    eos_token: str = ""
    mode: FormatMode = "chat"

    @classmethod
    def from_model(cls, model: TemplateSource, prefer: str = "auto") -> ChatFormat:
        """The model's template; without one, completion mode (or the plain frame if asked for)."""
        template = model.chat_template or None
        bos = model.token_text(model.bos_id) if model.bos_id >= 0 else ""
        eos = model.token_text(model.eos_id) if model.eos_id >= 0 else ""
        if template is None:
            mode: FormatMode = "plain-chat" if prefer == "chat" else "completion"
        else:
            mode = "completion" if prefer == "completion" else "chat"
        return cls(template=template, bos_token=bos, eos_token=eos, mode=mode)

    def switched(self, mode: str) -> ChatFormat:
        """This model's format in another mode (`chat` becomes `plain-chat` without a template)."""
        if not mode or mode == self.mode:
            return self
        if mode == "completion":
            return replace(self, mode="completion")
        return replace(self, mode="chat" if self.template else "plain-chat")

    @property
    def is_completion(self) -> bool:
        return self.mode == "completion"

    @cached_property
    def markers(self) -> reasoning.Markers | None:
        """The reasoning markers replies are split on (none for a continuation)."""
        return None if self.is_completion else reasoning.markers_for(self.template)

    @cached_property
    def thinking_switch(self) -> reasoning.ThinkingSwitch | None:
        """The template's variable for thinking (`enable_thinking`, `reasoning_effort`) or None."""
        return reasoning.thinking_switch(self.template) if self.mode == "chat" else None

    @cached_property
    def reasoning_key(self) -> reasoning.ReasoningKey:
        return reasoning.reasoning_key(self.template) if self.mode == "chat" else "none"

    def opens_reasoning(self, messages: Sequence[ChatMessage], style: PromptStyle | None = None) -> bool:
        """True when the prompt for these messages ends inside a reasoning block that the
        template opened (the reply starts in it, with no opening marker of its own). The
        generation prompt is what rendering with it adds past the common prefix, as llama.cpp
        finds it (`common_chat_template_generation_prompt_impl`, common/chat.cpp:974-993)."""
        if self.mode != "chat":
            return False
        if style is not None and style.continue_final:
            return style.continue_final == "reasoning" and self.writes_think_tags
        if style is not None and not style.add_generation_prompt:
            return False
        with_prompt = self.render(messages, True, style)
        without = self.render(messages, False, style)
        tail = with_prompt[reasoning.common_prefix_length(with_prompt, without):]
        return reasoning.opens_reasoning(tail, self.markers)

    @property
    def writes_think_tags(self) -> bool:
        """The template writes reasoning between an opening and a closing tag (`<think>`)."""
        markers = self.markers
        return self.mode == "chat" and markers is not None and bool(markers.open_tag) and \
            markers.open_tag in (self.template or "")

    @property
    def description(self) -> str:
        """One line for the UI: which format the prompts use."""
        if self.mode == "completion":
            return "base model: it continues your text"
        if self.mode == "plain-chat":
            return "no chat template in the GGUF: using a plain User/Assistant format"
        return "chat template from the GGUF metadata"

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end a reply; the plain frame has no end-of-turn token of its own, so a
        new turn label of any role (a model happily writes the next "Assistant:" itself) ends it.
        A completion runs until the model's end token or the token limit."""
        if self.mode == "plain-chat":
            return tuple(f"\n{label}:" for label in FALLBACK_LABELS.values())
        return ()

    def prompt_tokens(self, model: Tokenizer, messages: Sequence[ChatMessage],
                      style: PromptStyle | None = None) -> list[int]:
        """The conversation as the token ids the model reads next (the one place prompts are made)."""
        return encode_prompt(model, self.prompt_text(messages, style))

    def prompt_text(self, messages: Sequence[ChatMessage], style: PromptStyle | None = None) -> str:
        """The conversation as the prompt's text: rendered with the reply's opening, without it
        (`style.add_generation_prompt`), or continuing the last message (`style.continue_final`).

        A continuation is rendered as llama.cpp renders it (common/chat.cpp,
        `common_chat_templates_apply_jinja`, and `peg_generator::generate_parser`,
        common/chat-auto-parser-generator.cpp): every message but the last, without the reply's
        opening; then that opening (what rendering with it adds); for a template that thinks, the
        opening up to its reasoning marker, the marker, the message's reasoning and, to continue
        its content, the closing marker; then its content. A base model's running text already
        continues whatever comes last."""
        style = style or PromptStyle()
        if not style.continue_final or not messages or self.mode == "completion":
            return self.render(messages, style.add_generation_prompt, style)
        *head, last = messages
        without = self.render(head, False, style)
        with_prompt = self.render(head, True, style)
        opening = with_prompt[reasoning.common_prefix_length(with_prompt, without):]
        markers = self.markers
        if markers is not None and self.writes_think_tags:
            cut = opening.find(markers.open_tag)
            opening = (opening if cut < 0 else opening[:cut]) + markers.open_tag + last.reasoning
            if style.continue_final == "content":
                opening += markers.close_tag
        if style.continue_final == "content":
            opening += (" " if self.mode == "plain-chat" else "") + last.content
        return without + opening

    def template_variables(self, style: PromptStyle | None) -> dict[str, object]:
        """`enable_thinking` / `reasoning_effort`, only for a template that reads it; `tools`
        when the request has some."""
        style = style or PromptStyle()
        out: dict[str, object] = {"tools": [dict(t) for t in style.tools]} if style.tools else {}
        if self.thinking_switch == "enable_thinking":
            out["enable_thinking"] = style.thinking
        if self.thinking_switch == "reasoning_effort":
            out["reasoning_effort"] = style.reasoning_effort
        return out

    def render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True,
               style: PromptStyle | None = None) -> str:
        if self.mode == "completion":
            return render_completion(messages)
        if self.mode == "plain-chat":
            return render_plain(messages, add_generation_prompt)
        try:
            compiled = sandboxed_environment().from_string(self.template or "")
            return compiled.render(
                messages=[m.as_dict(self.reasoning_key, self.markers) for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **self.template_variables(style),
            )
        except TemplateError as error:
            raise ChatTemplateError(
                f"the model's chat template failed to render ({error}); "
                "this model may not support these messages (e.g. a system prompt)"
            ) from error


def render_plain(messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    """`System: …\\n\\nUser: …\\n\\nAssistant:` for a chat model whose GGUF has no template."""
    parts = [f"{FALLBACK_LABELS.get(m.role, m.role.title())}: {m.content}" for m in messages]
    if add_generation_prompt:
        parts.append("Assistant:")
    return "\n\n".join(parts)


def render_completion(messages: Sequence[ChatMessage]) -> str:
    """One running text: the system prompt (if any) as a preface, then every turn in order.

    The model's continuation follows the user's text directly; a later message from the user
    continues the same text (on a new line unless either side already has the whitespace).
    """
    text = ""
    for message in messages:
        piece = message.content
        if message.role == "system":
            piece = piece.rstrip() + "\n\n"
        elif message.role == "user" and text and not (text[-1].isspace() or piece[:1].isspace()):
            piece = "\n" + piece
        text += piece
    return text


class Tokenizer(Protocol):
    @property
    def add_bos(self) -> bool: ...
    @property
    def bos_id(self) -> int: ...
    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[int]: ...


def encode_prompt(model: Tokenizer, text: str) -> list[int]:
    """Prompt tokens with control tokens parsed and exactly one BOS where the model wants one.

    Templates often write `bos_token` themselves, so BOS is added only when it is missing.
    """
    tokens = model.tokenize(text, add_special=False, parse_special=True)
    if model.add_bos and model.bos_id >= 0 and (not tokens or tokens[0] != model.bos_id):
        tokens.insert(0, model.bos_id)
    return tokens
