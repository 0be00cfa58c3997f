"""What `spectui bench` will not measure, refused with the reason before anything runs.

A row bench prints must be a measurement of what was asked: speculation against the speculation-off
baseline on the same models. So it refuses, in one line with exit code 2 (`CannotMeasure`):

* `--drafter none`: speculation off compared with speculation off would print noise as a speed-up;
* a drafter the loaded models cannot run (`--drafter mtp` on a target without MTP heads): the
  generator would fall back to none and print a row for a drafter that never proposed;
* a prompt that, with `--max-tokens`, does not fit `--ctx`: the run would be cut by a full context
  and its figures would describe a shorter run than the one asked for.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spectui.errors import CannotMeasure

if TYPE_CHECKING:
    from spectui.engine.generator import Generator


def before_load(args: argparse.Namespace) -> None:
    """What the options alone rule out (before minutes of loading)."""
    if args.drafter == "none":
        raise CannotMeasure("bench compares a drafter with speculation off, and --drafter none is speculation off "
                            "itself: leave --drafter out (auto) or name one, e.g. --drafter model")


def after_load(gen: Generator, kind: str) -> None:
    """The drafter asked for must be one the loaded models run."""
    info = gen.describe()
    runnable = ", ".join(info.kinds) or "none"
    if kind != "auto" and any(member not in gen.drafters for member in kind.split("+")):
        why = "; ".join(gen.notes) or f"{kind} cannot run with these models"
        raise CannotMeasure(f"cannot measure --drafter {kind}: {why}; these models run: {runnable}")
    if not gen.can_speculate:
        why = gen.notes[0] if gen.notes else "no drafter runs with these models"
        raise CannotMeasure(f"nothing to compare with the baseline: {why}; pass --draft PATH or pick a pair "
                            "with a draft model")


def prompts_fit(prompts: Sequence[Sequence[int]], max_tokens: int, n_ctx: int) -> None:
    """Every prompt and its reply of `max_tokens` must fit the context."""
    for number, prompt in enumerate(prompts, start=1):
        need = len(prompt) + max_tokens
        if len(prompt) >= n_ctx:
            raise CannotMeasure(f"prompt {number} is {len(prompt)} tokens, more than the {n_ctx}-token context: "
                                "shorten it or raise --ctx")
        if need > n_ctx:
            raise CannotMeasure(f"prompt {number} ({len(prompt)} tokens) and --max-tokens {max_tokens} need {need} "
                                f"tokens, more than the {n_ctx}-token context: raise --ctx or lower --max-tokens")
