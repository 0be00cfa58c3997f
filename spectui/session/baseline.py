"""The speculation-off baseline: measured on the loaded target, on this machine, never assumed.

After loading, a short calibration decodes a fixed prompt with K = 0 (the same loop as a reply,
with no draft work). Any later reply that runs entirely with K = 0 replaces it, so the figure the
speedup divides by is always recent. `describe()` says how and when it was measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from spectui.engine.config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.events import Finished

if TYPE_CHECKING:
    from spectui.engine.generator import Generator

CALIBRATION_TOKENS = 32
WARM_UP_TOKENS = 4
CALIBRATION_PROMPT = "Explain, step by step, how a bicycle gear system works."


@dataclass(frozen=True)
class Baseline:
    tokens_per_second: float
    tokens: int
    source: str
    """How it was measured: 'calibration after load' or 'reply with speculation off'."""
    measured_at: datetime = field(default_factory=datetime.now)

    def describe(self, with_time: bool = True) -> str:
        when = f" {self.measured_at:%H:%M}" if with_time else ""
        return f"baseline: {self.tokens} tokens, K=0, {self.source}{when}"


def from_finished(finished: Finished, source: str) -> Baseline | None:
    """A baseline from a K = 0 generation, or None if it decoded too little to time."""
    stats = finished.stats
    if stats.decode_tokens < 2 or stats.decode_tps <= 0:
        return None
    return Baseline(stats.decode_tps, stats.decode_tokens, source)


def measure(generator: Generator, prompt: list[int], cancelled: Callable[[], bool],
            tokens: int = CALIBRATION_TOKENS) -> Baseline | None:
    """Decode up to `tokens` tokens greedily with speculation off and time them (blocking).

    A few tokens are decoded first, untimed, with speculation on: the first decodes after a
    load run on cold caches, which would understate the baseline (and flatter the speedup),
    and the draft gets the same warm-up before the first reply.
    """
    _run(generator, prompt, WARM_UP_TOKENS, DraftControl(2), cancelled)
    # +1: the first token comes out of the prompt pass and is not timed as decoding
    finished = _run(generator, prompt, tokens + 1, DraftControl(0, enabled=False), cancelled)
    if finished is None or finished.reason == "cancelled":
        return None
    return from_finished(finished, "calibration after load")


def _run(generator: Generator, prompt: list[int], tokens: int, control: DraftControl,
         cancelled: Callable[[], bool]) -> Finished | None:
    config = GenerationConfig(max_tokens=tokens, sampling=SamplingConfig(temperature=0.0))
    finished: Finished | None = None
    for event in generator.generate(prompt, config, control, cancelled):
        if isinstance(event, Finished):
            finished = event
    return finished
