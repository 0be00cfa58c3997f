"""Which head drafts fastest for a target on this machine: measured after load, remembered, asked first.

Where several heads on disk fit a target (and the target may carry MTP heads of its own), `auto`
runs the one that measured fastest here. The measurement is K = auto's calibration after load
(`spectui.session.baseline.calibrate`): a short K = auto run with the head against the K = 0
baseline, on the same prompt, in the same load, so the ratio is this machine's realised speed-up
(`spectui.session.head_order` records it). It is kept per target and head, each named by its file's
identity (resolved path, size, mtime: a file rewritten since is measured again), as a
token-weighted mean that old figures fade out of (`FADE_TOKENS`).

`choose`: a candidate not yet measured for this target goes first (this load measures it), so
after one load per head the fastest is known; then the best measured speed-up wins, and among
those within `TIE_MARGIN` of it, llama-server's order (mtp > dspark > dflash > eagle3; DFlash2
beside DFlash, `spectui.engine.drafters.DEFAULT_ORDER`) decides. The record is a small JSON in
spectui's cache folder, written whole (a temp file beside, fsync, rename); a damaged or
unwritable one only costs a measurement.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spectui import paths

TIE_MARGIN = 0.05
"""Speed-ups within 5 % of the best count as equal: one calibration times about 32 tokens, and two
loads of the same pair differ by a few per cent on a quiet machine; llama-server's order decides."""
FADE_TOKENS = 256
"""A head's record weighs its past tokens at most this many against a new measurement."""
OWN_HEADS = "mtp"
"""The head key of a target's own MTP heads (they live in the target's file)."""


class Measured(BaseModel):
    """One head's realised speed-up over the target alone, on this machine."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    """The drafter kind it ran as (mtp, dspark, dflash2, dflash, eagle3)."""

    speedup: float
    """Tokens per second with the head (K = auto) / with speculation off (K = 0)."""

    tokens: int
    """Tokens the figure rests on (capped at FADE_TOKENS once faded)."""

    acceptance: float = 0.0
    """Drafted tokens the target accepted, over the last measurement."""

    measured_at: str = ""
    """When last measured (ISO 8601, local time)."""


class SpeedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    targets: dict[str, dict[str, Measured]] = Field(default_factory=dict)
    """Target file identity -> head file identity (or OWN_HEADS) -> its figure."""


def speeds_path() -> Path:
    return paths.cache_dir() / "head-speeds.json"


def file_id(path: Path) -> str | None:
    """`RESOLVED|SIZE|MTIME_NS`, or None when the file cannot be read."""
    try:
        resolved = path.resolve()
        stat = os.stat(resolved)
    except OSError:
        return None
    return f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}"


def head_key(head: Path | None) -> str | None:
    """The record's key of a head file (None: the target's own MTP heads)."""
    return OWN_HEADS if head is None else file_id(head)


def read_speeds(path: Path | None = None) -> SpeedFile:
    try:
        return SpeedFile.model_validate(json.loads((path or speeds_path()).read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return SpeedFile()  # absent or damaged: only a measurement is lost


def measured_for(target: Path, path: Path | None = None) -> dict[str, Measured]:
    """Head key -> figure, for `target` as its file is now (a rewritten target: none)."""
    key = file_id(target)
    return {} if key is None else dict(read_speeds(path).targets.get(key, {}))


def remember(target: Path, head: Path | None, kind: str, speedup: float, tokens: int, acceptance: float = 0.0,
             path: Path | None = None) -> Measured | None:
    """Fold a measurement into the record (the head's running figure) and write it whole; the
    figure kept, or None when a file is gone or the record cannot be written."""
    target_key, key = file_id(target), head_key(head)
    if target_key is None or key is None or tokens <= 0 or not speedup > 0:
        return None
    record = read_speeds(path)
    heads = record.targets.setdefault(target_key, {})
    old = heads.get(key)
    if old is not None and old.kind == kind:
        weight = min(old.tokens, FADE_TOKENS)
        speedup = (old.speedup * weight + speedup * tokens) / (weight + tokens)
        tokens = min(weight + tokens, FADE_TOKENS)
    heads[key] = Measured(kind=kind, speedup=speedup, tokens=tokens, acceptance=acceptance,
                          measured_at=datetime.now().isoformat(timespec="seconds"))
    record.targets = {t: h for t, h in record.targets.items() if os.path.exists(t.rsplit("|", 2)[0])}
    from spectui.catalog.record import write_atomic

    try:
        write_atomic(path or speeds_path(), record.model_dump_json() + "\n")
    except OSError:
        return None  # a record that cannot be written only costs a measurement on the next load
    return heads[key]


@dataclass(frozen=True)
class Candidate:
    """A head that could draft for the target: its file (None: the target's own MTP heads) and kind."""

    head: Path | None
    kind: str


@dataclass(frozen=True)
class Choice:
    """Which candidate `auto` runs, and why, in words for its one-line notice."""

    index: int
    reason: str


def tie_rank(kind: str) -> int:
    """llama-server's order among head kinds (lower first)."""
    from spectui.engine.drafters import DEFAULT_ORDER

    return DEFAULT_ORDER.index(kind) if kind in DEFAULT_ORDER else len(DEFAULT_ORDER)


def choose(candidates: Sequence[Candidate], figures: Mapping[str, Measured]) -> Choice:
    """The candidate to run: the first not yet measured (llama-server's order), else the fastest
    measured, llama-server's order among those within TIE_MARGIN of the best."""
    if not candidates:
        raise ValueError("no candidates to choose from")
    keyed = [(i, c, figures.get(head_key(c.head) or "")) for i, c in enumerate(candidates)]
    fresh = [(i, c) for i, c, m in keyed if m is None or m.kind != c.kind]
    if len(candidates) == 1:
        return Choice(0, "")
    if fresh:
        i, _ = min(fresh, key=lambda ic: (tie_rank(ic[1].kind), ic[0]))
        done = len(candidates) - len(fresh)
        return Choice(i, f"not yet measured on this machine: this load measures it ({done} of "
                         f"{len(candidates)} measured; the fastest is kept)")
    best = max(m.speedup for _, _, m in keyed if m is not None)
    near = [(i, c, m) for i, c, m in keyed if m is not None and m.speedup >= best * (1 - TIE_MARGIN)]
    i, _, figure = min(near, key=lambda icm: (tie_rank(icm[1].kind), icm[0]))
    assert figure is not None
    tied = f", {len(near)} within {TIE_MARGIN:.0%}: llama-server's order decides" if len(near) > 1 else ""
    return Choice(i, f"the fastest measured on this machine ({figure.speedup:.2f}x the target alone{tied})")


def order(candidates: Sequence[Candidate], figures: Mapping[str, Measured]) -> list[int]:
    """Every candidate's index, in the order `choose` would pick them one after another."""
    left = list(range(len(candidates)))
    picked: list[int] = []
    while left:
        index = left[choose([candidates[i] for i in left], figures).index]
        picked.append(index)
        left.remove(index)
    return picked
