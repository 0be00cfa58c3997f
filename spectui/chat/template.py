"""Turn a conversation into the prompt text a model expects.

The chat template comes from the GGUF metadata (`tokenizer.chat_template`, a Hugging Face Jinja
template) and is rendered in a sandboxed Jinja environment with the helpers those templates use
(`raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII text). A model without a
template falls back to a plain `User:` / `Assistant:` format, and `ChatFormat.is_fallback` says so
for the UI to show.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from spectui.errors import SpectuiError

ROLES = ("system", "user", "assistant")
FALLBACK_LABELS = {"system": "System", "user": "User", "assistant": "Assistant"}


class ChatTemplateError(SpectuiError):
    """The model's chat template failed to render."""


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


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


@dataclass(frozen=True)
class ChatFormat:
    """How messages become prompt text for one model."""

    template: str | None
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def from_model(cls, model: TemplateSource) -> ChatFormat:
        template = model.chat_template
        bos = model.token_text(model.bos_id) if model.bos_id >= 0 else ""
        eos = model.token_text(model.eos_id) if model.eos_id >= 0 else ""
        return cls(template=template or None, bos_token=bos, eos_token=eos)

    @property
    def is_fallback(self) -> bool:
        return self.template is None

    @property
    def description(self) -> str:
        """One line for the UI: which format the prompts use."""
        if self.is_fallback:
            return "no chat template in the GGUF: using a plain User/Assistant format"
        return "chat template from the GGUF metadata"

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end a reply; the plain format has no end-of-turn token of its own, so a
        new turn label of any role (a base model happily writes the next "Assistant:" itself)
        ends it."""
        return tuple(f"\n{label}:" for label in FALLBACK_LABELS.values()) if self.is_fallback else ()

    def prompt_tokens(self, model: Tokenizer, messages: Sequence[ChatMessage]) -> list[int]:
        """The conversation as the token ids the model reads next (the one place prompts are made)."""
        return encode_prompt(model, self.render(messages, add_generation_prompt=True))

    def render(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        if self.is_fallback:
            return render_plain(messages, add_generation_prompt)
        try:
            compiled = sandboxed_environment().from_string(self.template or "")
            return compiled.render(
                messages=[m.as_dict() for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as error:
            raise ChatTemplateError(
                f"the model's chat template failed to render ({error}); "
                "this model may not support these messages (e.g. a system prompt)"
            ) from error


def render_plain(messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
    """`System: …\\n\\nUser: …\\n\\nAssistant:` for models that carry no template."""
    parts = [f"{FALLBACK_LABELS.get(m.role, m.role.title())}: {m.content}" for m in messages]
    if add_generation_prompt:
        parts.append("Assistant:")
    return "\n\n".join(parts)


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
