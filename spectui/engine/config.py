"""Settings for one generation, and the draft-length control the UI turns while it runs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

from spectui.limits import MAX_DRAFT

AUTO: Literal["auto"] = "auto"
DraftLength = int | Literal["auto"]


@dataclass(frozen=True)
class SamplingConfig:
    """How a token is chosen from logits; the draft uses the same processing as the target."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class GenerationConfig:
    """Limits of one reply."""

    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


class DraftControl:
    """Draft length K (0 = speculation off, or `auto`), safe to change from another thread.

    The speculative loop reads `k` once at the start of every cycle, so a change made by the UI
    applies from the next cycle of a reply that is already running.
    """

    def __init__(self, k: DraftLength = AUTO, enabled: bool = True) -> None:
        self._lock = threading.Lock()
        self._k: DraftLength = validate_k(k)
        self._enabled = enabled

    @property
    def k(self) -> DraftLength:
        """The configured K, whether or not speculation is enabled."""
        with self._lock:
            return self._k

    @property
    def enabled(self) -> bool:
        with self._lock:
            return self._enabled

    def effective_k(self) -> DraftLength:
        """What the next cycle uses: 0 when speculation is off."""
        with self._lock:
            return self._k if self._enabled else 0

    def set_k(self, k: DraftLength) -> None:
        with self._lock:
            self._k = validate_k(k)

    def set_enabled(self, enabled: bool) -> None:
        with self._lock:
            self._enabled = enabled

    def toggle(self) -> bool:
        with self._lock:
            self._enabled = not self._enabled
            return self._enabled

    def step(self, delta: int) -> DraftLength:
        """K up or down by one; above 16 wraps to `auto`, `auto` down goes to 16, up to 1."""
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
