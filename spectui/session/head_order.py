"""A load's calibration, remembered as its head's speed on this machine (`catalog.local.head_speeds`).

`auto`'s pick among several heads on disk for one target is the one measured fastest here. The
measurement is the calibration after load (`baseline.calibrate`): K = auto's warm run with the
head, then the target alone at K = 0, on the same prompt, in the same load. Their ratio of decode
speeds is the head's realised speed-up; `record` keeps it per target and head file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spectui.engine.generator import Generator

MIN_WARM_TOKENS = 8
"""Fewer drafted-run tokens than this say nothing of a head's speed."""
HEAD_KINDS = ("mtp", "dspark", "dflash2", "dflash", "eagle3")
"""The kinds `auto` chooses between by measurement (the heads: a draft model is paired by size)."""


def speedup(warm_tokens: int, warm_seconds: float, baseline_tps: float | None) -> float | None:
    """The warm run's decode speed over the baseline's, or None when either timed too little."""
    if baseline_tps is None or baseline_tps <= 0 or warm_tokens < MIN_WARM_TOKENS or warm_seconds <= 0:
        return None
    return warm_tokens / warm_seconds / baseline_tps


def head_files(generator: Generator) -> tuple[Path, Path | None, str] | None:
    """(target file, head file, kind) of the head `auto` runs in this generator (head file None:
    the target's own MTP heads); None when `auto` runs no head, or the models have no files."""
    kind = generator.default_kind
    drafter = generator.drafter(kind) if kind in HEAD_KINDS else None
    target = getattr(generator.target, "path", None)
    if drafter is None or not isinstance(target, Path):
        return None
    model = getattr(drafter, "sidecar" if kind == "mtp" else "model", None)
    head = getattr(model, "path", None)
    if kind == "mtp" and model is None:
        return target, None, kind
    return (target, head, kind) if isinstance(head, Path) else None


def record(generator: Generator, warm_tokens: int, warm_seconds: float, acceptance: float,
           baseline_tps: float | None) -> None:
    """Remember what this load's calibration measured of its head (`warm_*`: K = auto's run with
    it; `baseline_tps`: the target alone), nothing when it ran none."""
    found, ratio = head_files(generator), speedup(warm_tokens, warm_seconds, baseline_tps)
    if found is None or ratio is None:
        return
    from spectui.catalog.local.head_speeds import remember

    target, head, kind = found
    remember(target, head, kind, ratio, warm_tokens, acceptance)
