"""argparse `type=` functions: every option is checked where it is parsed, against `spectui.limits`.

Each refusal is one line naming the allowed range and the value given; argparse adds the option's
name (`argument --repeat: must be a whole number from 1 to 100, not 0`). Nothing is silently
replaced: a value outside its range is refused, never clamped or swapped for a default.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from spectui import limits

AUTO = "auto"


def _fail(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def _whole(value: str, allowed: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise _fail(f"must be {allowed}, not {value!r}") from None


def int_range(low: int, high: int, *, low_label: str = "") -> Callable[[str], int]:
    """A parser for a whole number in low..high (`low_label` names a special low value)."""
    special = f" ({low_label})" if low_label else ""
    allowed = f"a whole number from {low}{special} to {high}"

    def parse(value: str) -> int:
        number = _whole(value, allowed)
        if not low <= number <= high:
            raise _fail(f"must be {allowed}, not {number}")
        return number

    parse.__name__ = "int_range"
    return parse


repeat = int_range(1, limits.MAX_REPEAT)
max_tokens = int_range(1, limits.MAX_REPLY_TOKENS)
bench_max_tokens = int_range(2, limits.MAX_REPLY_TOKENS)
"""A bench needs 2 tokens: the first comes from reading the prompt, so 1 would time no decoding."""
threads = int_range(1, limits.MAX_THREADS)
seed = int_range(0, limits.MAX_SEED)
chat_id = int_range(1, limits.MAX_CHAT_ID)
port = int_range(0, limits.MAX_PORT, low_label="any free port")
waiting = int_range(0, limits.MAX_WAITING)


def gpu_layers(value: str) -> int:
    """-1 (every layer) or 0..MAX_GPU_LAYERS; llama.cpp would read any other negative as -1."""
    allowed = f"-1 (all layers) or a whole number from 0 to {limits.MAX_GPU_LAYERS}"
    number = _whole(value, allowed)
    if not -1 <= number <= limits.MAX_GPU_LAYERS:
        raise _fail(f"must be {allowed}, not {number}")
    return number


def context_length(value: str) -> int:
    """A multiple of 256 from 256 up: llama.cpp would silently round anything else up."""
    allowed = f"a multiple of {limits.CTX_STEP} from {limits.MIN_CTX} to {limits.MAX_CTX}"
    number = _whole(value, allowed)
    if not limits.MIN_CTX <= number <= limits.MAX_CTX:
        raise _fail(f"must be {allowed} tokens, not {number}")
    if number % limits.CTX_STEP:
        down = number // limits.CTX_STEP * limits.CTX_STEP
        up = down + limits.CTX_STEP
        choices = f"{down} or {up}" if down >= limits.MIN_CTX else str(up)
        raise _fail(f"must be {allowed} (llama.cpp sizes contexts in steps of "
                    f"{limits.CTX_STEP}), not {number}: use {choices}")
    return number


def temperature(value: str) -> float:
    return _bounded_float(value, limits.MAX_TEMPERATURE, f"a number from 0 (greedy) to {limits.MAX_TEMPERATURE:g}")


def probability(value: str) -> float:
    """top-p or min-p: a number from 0 to 1."""
    return _bounded_float(value, limits.MAX_PROBABILITY, f"a number from 0 to {limits.MAX_PROBABILITY:g}")


top_k = int_range(0, limits.MAX_TOP_K, low_label="off")


def seconds(value: str) -> float:
    """A duration in seconds, 0 to an hour."""
    allowed = f"a number of seconds from 0 to {limits.MAX_DRAIN_SECONDS:g}"
    return _bounded_float(value, limits.MAX_DRAIN_SECONDS, allowed)


def _bounded_float(value: str, high: float, allowed: str) -> float:
    """A finite number from 0 to `high`; else the one line saying what is `allowed`."""
    try:
        number = float(value)
    except ValueError:
        raise _fail(f"must be {allowed}, not {value!r}") from None
    if not math.isfinite(number) or not 0.0 <= number <= high:
        raise _fail(f"must be {allowed}, not {value}")
    return number


def draft_length(value: str) -> int | str:
    """A draft length: 0..MAX_DRAFT (0 = speculation off) or `auto`."""
    allowed = f"0..{limits.MAX_DRAFT} or 'auto'"
    text = value.strip()
    if text == AUTO:
        return AUTO
    try:
        k = int(text)
    except ValueError:
        raise _fail(f"draft length must be {allowed}, not {value!r}") from None
    if not 0 <= k <= limits.MAX_DRAFT:
        raise _fail(f"draft length must be {allowed}, not {k}")
    return k


def draft_lengths(value: str) -> list[int | str]:
    """`4`, `auto`, or a sweep such as `1,2,4,8` for `spectui bench`: each K once, none 0.

    K = 0 is the baseline every row of the bench is measured against, so a row for it would
    compare the baseline with itself.
    """
    parts = [part.strip() for part in value.split(",")]
    if not any(parts):
        raise _fail(f"give K as 1..{limits.MAX_DRAFT}, 'auto', or a list such as 1,2,4,8; not {value!r}")
    ks = [draft_length(part) for part in parts if part]
    if 0 in ks:
        raise _fail(f"K=0 is the speculation-off baseline that every row is measured against; "
                    f"give K from 1 to {limits.MAX_DRAFT} or 'auto', not {value!r}")
    seen: set[int | str] = set()
    for k in ks:
        if k in seen:
            raise _fail(f"K={k} is listed twice in {value!r}; list each K once")
        seen.add(k)
    return ks


def text(value: str) -> str:
    """Text that must say something (a prompt)."""
    if not value.strip():
        raise _fail(f"must not be empty, not {value!r}")
    return value


def path(value: str) -> str:
    """A file path: an empty one would silently mean 'not given'."""
    if not value.strip():
        raise _fail("must be a path to a file, not an empty string")
    return value


def name(value: str) -> str:
    """A pair name: an empty one would silently mean 'the default pair'."""
    if not value.strip():
        raise _fail("must be a pair name (see `spectui list`), not an empty string")
    return value
