"""A chat's own settings: how its replies are sampled and how long they may be.

They start from the command line (`--temperature`, `--top-k`, `--top-p`, `--min-p`, `--seed`,
`--max-tokens`), change in the app's settings screen (ctrl+s), are saved with the chat (the store's
`chats.settings`, JSON) and apply from the next reply. A new chat (ctrl+n) starts with the settings
of the chat it replaces. The system prompt is not here: it is the chat's first message, saved as one.

A sampling value left unset (None) is the loaded model's recommendation (its GGUF's
`general.sampling.*`), else llama.cpp's defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05, how
people chat. Greedy decoding is one setting away (temperature 0).

Every bound is `spectui.limits`'s, so the screen, the command line and a stored row agree.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spectui import limits
from spectui.engine.generation_config import SAMPLING_KEYS, RecommendedSampling, SamplingConfig

Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")


class ChatSettings(BaseModel):
    """Sampling and length of a chat's replies, and whether a reasoning model thinks first."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = Field(None, ge=0.0, le=limits.MAX_TEMPERATURE)
    """0 is greedy (the target's most likely token, the same reply every time); None: the model's."""
    top_p: float | None = Field(None, ge=0.0, le=limits.MAX_PROBABILITY)
    """Nucleus sampling: keep the most likely tokens whose mass reaches top_p (1 = off); None: the model's."""
    top_k: int | None = Field(None, ge=0, le=limits.MAX_TOP_K)
    """Keep the k most likely tokens (0 = off); None: the model's."""
    min_p: float | None = Field(None, ge=0.0, le=limits.MAX_PROBABILITY)
    """Drop tokens less likely than min_p times the most likely one (0 = off); None: the model's."""
    seed: int | None = Field(None, ge=0, le=limits.MAX_SEED)
    """Same seed, same reply; None draws a fresh one for every reply."""
    max_tokens: int | None = Field(None, ge=1, le=limits.MAX_REPLY_TOKENS)
    """Most tokens per reply; None: the app's default (more for a chat than for a continuation)."""
    thinking: bool = True
    """For templates that take `enable_thinking` (Qwen3 and kin): think before answering."""
    reasoning_effort: Effort = "medium"
    """For templates that take `reasoning_effort` (gpt-oss): how long to reason."""

    def sampling(self, recommended: RecommendedSampling | None = None) -> SamplingConfig:
        """The sampling in force: each value set here, the rest `recommended`'s."""
        base = (recommended or RecommendedSampling()).sampling
        chosen = {name: value for name in SAMPLING_KEYS if (value := getattr(self, name)) is not None}
        return replace(base, seed=self.seed, **chosen)

    def follows_model(self) -> bool:
        """True when no sampling value is set here: the model's recommendation applies whole."""
        return all(getattr(self, name) is None for name in SAMPLING_KEYS)

    def stored(self) -> dict[str, Any]:
        """What the store keeps (JSON)."""
        return self.model_dump()

    @classmethod
    def from_stored(cls, data: object, base: ChatSettings | None = None) -> ChatSettings:
        """Settings read back from the store: each value that is valid is kept, anything else
        (a damaged row, a key from another version) falls back to `base`'s value, never an error."""
        settings = base or cls()
        if not isinstance(data, dict):
            return settings
        for key, value in data.items():
            if key not in cls.model_fields:
                continue
            try:
                settings = cls.model_validate({**settings.model_dump(), key: value})
            except ValidationError:
                continue
        return settings

    def describe(self, recommended: RecommendedSampling | None = None) -> str:
        """The panel's header line, e.g. `T=0.8 top-p 0.95 top-k 40 min-p 0.05 (llama.cpp's
        defaults) · seed random`."""
        sampling = self.sampling(recommended)
        parts = [sampling.describe()]
        if self.follows_model() and recommended is not None and not sampling.greedy:
            parts[0] += f" ({recommended.origin})"
        if not sampling.greedy:
            parts.append(f"seed {self.seed}" if self.seed is not None else "seed random")
        if self.max_tokens is not None:
            parts.append(f"max {self.max_tokens} tok")
        return " · ".join(parts)

