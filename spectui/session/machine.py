"""How busy the machine is with other work: what a baseline must be compared under, and how many
threads llama.cpp should use.

Linux's /proc/stat gives the CPU time of every process together and /proc/self/stat ours; the
difference over an interval is the CPU the rest of the machine used, in cores. Elsewhere the
meter reports nothing and callers fall back to what they would do without it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

STAT = Path("/proc/stat")
SELF_STAT = Path("/proc/self/stat")
CHANGED_BY = 0.5
"""Cores of other work that make an earlier baseline incomparable (a 2-core machine where another
program now uses half a core runs llama.cpp noticeably slower)."""
IDLE_FOR_A_THREAD = 0.6
"""A core counts as free for a llama.cpp thread when other work leaves at least this much of it."""


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _busy_jiffies() -> int | None:
    """Non-idle CPU time of the whole machine, in clock ticks."""
    try:
        fields = STAT.read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    guest = sum(values[8:10]) if len(values) > 9 else 0  # already counted in user/nice
    return sum(values) - idle - guest


def _own_jiffies() -> int | None:
    """CPU time of this process (all its threads), in clock ticks."""
    try:
        after_name = SELF_STAT.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(after_name[11]) + int(after_name[12])  # utime, stime


@dataclass
class LoadMeter:
    """Cores used by other processes between two readings."""

    _at: float = 0.0
    _busy: int | None = None
    _own: int | None = None

    def __post_init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._at, self._busy, self._own = time.monotonic(), _busy_jiffies(), _own_jiffies()

    def others(self) -> float | None:
        """Average cores other processes used since the last call (None where unknown)."""
        busy0, own0, at0 = self._busy, self._own, self._at
        self._reset()
        busy, own = self._busy, self._own
        if busy0 is None or own0 is None or busy is None or own is None or self._at - at0 < 0.05:
            return None
        ticks = os.sysconf("SC_CLK_TCK") * (self._at - at0)
        return max(0.0, ((busy - busy0) - (own - own0)) / ticks)

    def sample(self, seconds: float = 0.25) -> float | None:
        """Others' load measured over the next `seconds` (blocks)."""
        self._reset()
        time.sleep(seconds)
        return self.others()


def default_threads(others: float | None, cores: int | None = None) -> int:
    """Threads for llama.cpp: one per core that other work leaves free, at least one.

    llama.cpp's threads wait for each other at every step of a pass; a thread whose core is taken
    by another program stalls all of them, so on a busy machine fewer threads run faster (see
    docs/BENCHMARKS.md, "threads on a busy machine").
    """
    cores = cores or cpu_count()
    if others is None:
        return cores
    free = cores - others
    return max(1, min(cores, int(free + (1 - IDLE_FOR_A_THREAD))))


def load_changed(then: float | None, now: float | None) -> bool:
    """True when the machine's other work differs enough to make a baseline incomparable."""
    if then is None or now is None:
        return False
    return abs(now - then) >= CHANGED_BY
