"""The speculation-off baseline: measured on the loaded target, on this machine, never assumed.

Right after loading, a calibration pays everything a first reply would otherwise pay once, inside
the time the load takes anyway: the first touch of every model's weights, K = auto's first
estimates (a short speculative run, so the first reply starts from measured acceptance and costs),
and a timed run of the target alone with K = 0 — the baseline.

A baseline is only comparable under the conditions it was measured in. When it is old, or the
machine's other work has changed since, the next reply decodes its first few tokens with
speculation off and timed apart (a probe: the reply itself is unchanged) and that becomes the
baseline. Any reply run entirely at K = 0 replaces it too. `describe()` says how, when and how
long ago it was measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from spectui import faults
from spectui.engine.events import CycleStats, Finished, GenerationStats
from spectui.engine.generation_config import AUTO, DraftControl, SamplingConfig
from spectui.session.machine import load_changed
from spectui.session.reply import ReplyDone, ReplyRequest, run_reply

if TYPE_CHECKING:
    from spectui.chat.template import ChatFormat
    from spectui.engine.generator import Generator

CALIBRATION_TOKENS = 32
FIRST_TOUCH_TOKENS = 4
AUTO_WARM_TOKENS = 32
PROBE_TOKENS = 16
"""Tokens a reply decodes with speculation off when the baseline has gone stale."""
MAX_AGE_SECONDS = 600.0
MIN_TIMED_TOKENS = 8
CALIBRATION_PROMPT = "Explain, step by step, how a bicycle gear system works."
COMPLETION_PROMPT = ("The old lighthouse stood at the end of the harbour wall. Every evening the keeper climbed "
                     "its hundred steps, and every evening")
"""What a base model (completion mode) is calibrated on: text to continue, as its users write."""


@dataclass(frozen=True)
class Baseline:
    tokens_per_second: float
    tokens: int
    source: str
    """How it was measured: 'calibration after load', 'reply with speculation off', …"""
    measured_at: datetime = field(default_factory=datetime.now)
    round_trips_per_token: float = 0.0
    """With the target on RPC workers: network round trips per token with speculation off."""
    others_load: float | None = None
    """Cores other programs used while it was measured (None where unknown)."""

    def describe(self, with_time: bool = True, now: datetime | None = None) -> str:
        if not with_time:
            return f"baseline: {self.tokens} tokens, K=0, {self.source}"
        age = ((now or datetime.now()) - self.measured_at).total_seconds()
        return f"baseline: {self.tokens} tokens, K=0, {self.source} {self.measured_at:%H:%M} ({_ago(age)})"

    def is_stale(self, others_now: float | None, now: datetime | None = None) -> bool:
        """Too old, or measured while the machine was busier or quieter than it is now."""
        age = ((now or datetime.now()) - self.measured_at).total_seconds()
        return age > MAX_AGE_SECONDS or load_changed(self.others_load, others_now)


def baseline_probe(baseline: Baseline | None, others_now: float | None, now: datetime | None = None) -> int:
    """Tokens the next reply should decode with speculation off to re-measure the baseline."""
    return PROBE_TOKENS if baseline is None or baseline.is_stale(others_now, now) else 0


def _ago(seconds: float) -> str:
    if seconds < 60:
        return "just now"
    minutes = int(seconds // 60)
    return f"{minutes} min ago" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min ago"


def from_stats(stats: GenerationStats, source: str, others_load: float | None = None) -> Baseline | None:
    """A baseline from a reply: its probe if it had one, else the whole reply if it ran at K = 0
    (the caller knows); None when too little was timed."""
    if stats.probe_tokens >= MIN_TIMED_TOKENS and stats.probe_tps > 0:
        return Baseline(stats.probe_tps, stats.probe_tokens, source, others_load=others_load)
    if stats.decode_tokens < 2 or stats.decode_tps <= 0:
        return None
    return Baseline(stats.decode_tps, stats.decode_tokens, source,
                    round_trips_per_token=stats.round_trips_per_token, others_load=others_load)


OWN_CYCLES_TOKENS = 32
"""Tokens a reply must have decoded in passes that verified no draft before they are its baseline."""
OWN_CYCLES_SOURCE = "this reply's own 1-row passes"
PLAIN_DRAFT_SHARE = 0.1
"""A cycle that spent more of its time drafting than this (a draft model's pass that ended with
no token) is not a plain one, and neither is the next: the target's threads, idle while the
draft ran, wake late for its pass - a cost of speculation, which a baseline must not carry."""


def from_plain_cycles(cycles: Iterable[CycleStats]) -> Baseline | None:
    """A reply's cycles that drafted nothing and followed one that drafted nothing (K = auto
    holding back, a baseline probe), each a 1-row pass of the target, timed as a reply with
    speculation off is: the baseline measured under this reply's own conditions (its context,
    the machine's load, the app drawing it beside the model), where the baseline from the last
    load or reply was measured under others. In the app on 2 cores a K = 0 reply's speed fell
    from 41 to 26 tok/s over six replies of one chat (docs/BENCHMARKS.md, "The app's own cost"):
    against a baseline from the load, a reply held at K = 0 throughout read 0.78x. None until
    `OWN_CYCLES_TOKENS` were decoded so."""
    tokens, seconds, after_plain = 0, 0.0, True  # the first follows the prompt's pass: a K = 0 reply counts whole
    for cycle in cycles:
        plain = cycle.drafted == 0 and cycle.draft_seconds <= PLAIN_DRAFT_SHARE * cycle.seconds
        if plain and after_plain:
            tokens, seconds = tokens + cycle.emitted, seconds + cycle.seconds - cycle.draft_seconds
        after_plain = plain
    if tokens < OWN_CYCLES_TOKENS or seconds <= 0:
        return None
    return Baseline(tokens / seconds, tokens, OWN_CYCLES_SOURCE)


def from_finished(finished: Finished, source: str, others_load: float | None = None) -> Baseline | None:
    return from_stats(finished.stats, source, others_load)


@dataclass(frozen=True)
class Calibration:
    """What the calibration after load measured."""

    baseline: Baseline | None
    warm_tokens: int = 0
    warm_acceptance: float = 0.0
    warm_seconds: float = 0.0

    def describe(self, with_figures: bool = True) -> str:
        """One line for the panel: what the first reply no longer pays for (`with_figures=False`
        leaves out what depends on timing, such as how far K = auto chose to draft)."""
        if not self.warm_tokens:
            return ""
        if not with_figures:
            return "warm start: weights touched and K=auto calibrated during the load"
        acceptance = f", {self.warm_acceptance:.0%} accepted" if self.warm_acceptance else ""
        return (f"warm start: weights touched and K=auto calibrated on {self.warm_tokens} tokens"
                f"{acceptance} during the load")


def calibrate(generator: Generator, chat_format: ChatFormat, prompt: list[int], cancelled: Callable[[], bool],
              tokens: int = CALIBRATION_TOKENS, others_load: float | None = None) -> Calibration:
    """Warm up, seed K = auto, and time the target alone, each a reply through the reply core
    (blocking; run it in a worker, with the session's lock held: `EngineSession.load` does)."""
    _run(generator, chat_format, prompt, FIRST_TOUCH_TOKENS, DraftControl(2), cancelled)  # cold pages, first shapes
    generator.forget_measurements()  # first-touch timings are not typical
    warm = None
    if generator.can_speculate:
        warm = _run(generator, chat_format, prompt, AUTO_WARM_TOKENS + 1, DraftControl(AUTO), cancelled)
    # +1: the first token comes out of the prompt pass and is not timed as decoding
    done = _run(generator, chat_format, prompt, tokens + 1, DraftControl(0, enabled=False), cancelled)
    if done is None or done.reason == "cancelled":
        return Calibration(None)
    baseline = from_stats(done.stats, "calibration after load", others_load)
    if warm is None:
        return Calibration(baseline)
    stats = warm.stats
    calibration = Calibration(baseline, stats.decode_tokens, stats.acceptance_rate, stats.decode_seconds)
    from spectui.session import head_order  # auto's pick among heads: this head's speed, remembered

    head_order.record(generator, stats.decode_tokens, stats.decode_seconds, stats.acceptance_rate,
                      None if baseline is None else baseline.tokens_per_second)
    return calibration


def _run(generator: Generator, chat_format: ChatFormat, prompt: list[int], tokens: int, control: DraftControl,
         cancelled: Callable[[], bool]) -> ReplyDone | None:
    """One greedy reply to `prompt` (its tokens as they are: no template, no stop strings)."""
    request = ReplyRequest(prompt=tuple(prompt), sampling=SamplingConfig(temperature=0.0), max_tokens=tokens,
                           draft=control)
    done = None
    for event in run_reply(generator, chat_format, request, cancelled):
        if isinstance(event, ReplyDone):
            done = event
    if done is not None:
        faults.raise_for(done)  # a worker lost or a file changed: the load failed, say so
    return done
