"""Settings for one generation, and the draft-length control the UI turns while it runs."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

import numpy as np

from spectui.limits import MAX_DRAFT, MAX_PROBABILITY, MAX_TEMPERATURE, MAX_TOP_K

AUTO: Literal["auto"] = "auto"
DraftLength = int | Literal["auto"]


class TokenConstraint(Protocol):
    """Which tokens may come next (a grammar's live state during one reply; `engine.step.grammar`)."""

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """A boolean mask over `ids`: True where the token may come next."""

    def accept(self, token: int) -> None:
        """Advance past `token` (which `allowed` said may come next)."""

    def fork(self) -> TokenConstraint:
        """An independent copy of the current state (a drafter advances it along its proposal)."""

    def sleeps_through(self, tokens: Sequence[int]) -> bool:
        """True when the constraint allows every token now and stays so after any of `tokens`
        (a lazy grammar none of them wakes): a token tree may then be verified as if free."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class SamplingConfig:
    """How a token is chosen from logits; the draft uses the same processing as the target.

    In order: `logit_bias` is added to the logits, `constraint` (the grammar) removes tokens
    that may not come next, then top-k, temperature, top-p and min-p (`engine.step.sampling`). The
    target's p and the drafter's q both go through all of it, so the rejection rule compares the
    distributions the reply is promised to follow.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    """(token, bias) pairs added to the logits before anything else (OpenAI's `logit_bias`);
    a bias of -inf bans the token."""
    grammar: str | None = None
    """A GBNF grammar every reply must follow (llama.cpp's grammar sampler); None: free text."""
    grammar_triggers: tuple[int, ...] = ()
    """Tokens that wake a lazy grammar: the reply is free until one of them is chosen, then the
    grammar holds from that token on (llama.cpp's lazy grammar; a tool call's opening token)."""
    constraint: TokenConstraint | None = field(default=None, compare=False, repr=False)
    """The grammar's live state during one reply: set by the generator, never by a caller."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def describe(self) -> str:
        """`T=0 (greedy)`, or the temperature and the filters in force: `T=0.8 top-p 0.95 top-k 40
        min-p 0.05` (the seed apart)."""
        if self.greedy:
            return "T=0 (greedy)"
        filters = [f"T={self.temperature:g}"]
        if self.top_p < 1.0:
            filters.append(f"top-p {self.top_p:g}")
        if self.top_k > 0:
            filters.append(f"top-k {self.top_k}")
        if self.min_p > 0.0:
            filters.append(f"min-p {self.min_p:g}")
        return " ".join(filters)


LLAMA_CPP_SAMPLING = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
"""llama.cpp's own defaults (common/common.h: temp 0.80, top_k 40, top_p 0.95, min_p 0.05), the ones
llama-server, LM Studio and Ollama users chat with. A chat starts here unless its model says
otherwise (`recommended_sampling`); bench and the tests ask for T = 0 themselves."""

SAMPLING_KEYS = {"temperature": "general.sampling.temp", "top_k": "general.sampling.top_k",
                 "top_p": "general.sampling.top_p", "min_p": "general.sampling.min_p"}
"""The GGUF keys a model's publisher recommends its sampling with (llama.cpp reads the same ones
in `common_params_sampling_from_model`, common/common.cpp)."""


@dataclass(frozen=True)
class RecommendedSampling:
    """Where a chat's sampling starts: the model's own recommendation, else llama.cpp's defaults."""

    sampling: SamplingConfig = LLAMA_CPP_SAMPLING
    from_model: tuple[str, ...] = ()
    """The fields (`temperature`, `top_k`, ...) the GGUF set; the rest are llama.cpp's."""

    @property
    def origin(self) -> str:
        return "the model's" if self.from_model else "llama.cpp's defaults"


def recommended_sampling(meta: Callable[[str], str | None]) -> RecommendedSampling:
    """Read `general.sampling.*` through `meta` (a GGUF key -> its value as text, or None), as
    llama.cpp does: a value that does not parse, or lies outside spectui's bounds, is ignored."""
    values: dict[str, float | int] = {}
    for field_name, key in SAMPLING_KEYS.items():
        value = _leading_number(meta(key), integer=field_name == "top_k")
        if value is not None and _in_bounds(field_name, value):
            values[field_name] = value
    base = LLAMA_CPP_SAMPLING
    sampling = replace(base, temperature=values.get("temperature", base.temperature),
                       top_k=int(values.get("top_k", base.top_k)), top_p=values.get("top_p", base.top_p),
                       min_p=values.get("min_p", base.min_p))
    return RecommendedSampling(sampling, tuple(values))


def _leading_number(text: str | None, integer: bool) -> float | int | None:
    """strtol/strtof's reading: the longest number at the start of `text`, or None."""
    match = re.match(r"\s*[-+]?\d+" if integer else r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text or "")
    if not match:
        return None
    return int(match.group()) if integer else float(match.group())


def _in_bounds(field_name: str, value: float) -> bool:
    if field_name == "temperature":
        return 0.0 <= value <= MAX_TEMPERATURE
    if field_name == "top_k":
        return 0 <= value <= MAX_TOP_K
    return 0.0 <= value <= MAX_PROBABILITY


@dataclass(frozen=True)
class GenerationConfig:
    """Limits of one reply."""

    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    logprobs: int | None = None
    """None: no log-probabilities; n >= 0: each token's log-probability under the target, with
    the n most likely alternatives (`TokenLogprobs` events)."""
    baseline_probe: int = 0
    """Decode this many tokens after the first with speculation off, timed apart: a baseline
    measured under this moment's conditions, at no extra cost (the reply is the same)."""
    shown_tokens: frozenset[int] = frozenset()
    """Control tokens written into the reply's text as their text (llama.cpp otherwise renders a
    control token as nothing): a tool call's markers, as llama-server's `preserved_tokens`."""


class DraftControl:
    """Draft length K (0 = speculation off, or `auto`) and the drafter in use, safe to change from
    another thread.

    The speculative loop reads both once at the start of every cycle, so a change made by the UI
    applies from the next cycle of a reply that is already running. `drafter` names a kind the
    loaded generator offers (`model`, `model+suffix`, …); None means the generator's default.
    """

    def __init__(self, k: DraftLength = AUTO, enabled: bool = True, drafter: str | None = None) -> None:
        self._lock = threading.Lock()
        self._k: DraftLength = validate_k(k)
        self._enabled = enabled
        self._drafter = drafter

    @property
    def k(self) -> DraftLength:
        """The configured K, whether or not speculation is enabled."""
        with self._lock:
            return self._k

    @property
    def enabled(self) -> bool:
        with self._lock:
            return self._enabled

    @property
    def drafter(self) -> str | None:
        with self._lock:
            return self._drafter

    def effective_k(self) -> DraftLength:
        """What the next cycle uses: 0 when speculation is off."""
        with self._lock:
            return self._k if self._enabled else 0

    def set_k(self, k: DraftLength) -> None:
        with self._lock:
            self._k = validate_k(k)

    def set_drafter(self, drafter: str | None) -> None:
        with self._lock:
            self._drafter = drafter

    def toggle(self) -> bool:
        with self._lock:
            self._enabled = not self._enabled
            return self._enabled

    def step(self, delta: int) -> DraftLength:
        """K up or down by one; above MAX_DRAFT wraps to `auto`, `auto` down goes to MAX_DRAFT, up to 1."""
        with self._lock:
            if self._k == AUTO:
                self._k = MAX_DRAFT if delta < 0 else 1
            else:
                nxt = self._k + delta
                self._k = AUTO if nxt > MAX_DRAFT else max(1, nxt)
            return self._k


def validate_k(k: DraftLength) -> DraftLength:
    if k == AUTO:
        return AUTO
    if not isinstance(k, int) or not 0 <= k <= MAX_DRAFT:
        raise ValueError(f"draft length must be 0..{MAX_DRAFT} or 'auto', not {k!r}")
    return k
