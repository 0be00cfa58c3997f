"""Where a cycle's time goes: inside llama.cpp's decode calls, or on the host around them.

On a GPU one verify pass of a 7B target takes ~10-20 ms, so host work per cycle that is lost in
the noise on a CPU (reading K+1 rows of a 150k-250k vocabulary, sampling, acceptance, Python
bookkeeping) becomes a real share of it. The engine therefore counts, per thread, the seconds
spent inside llama.cpp's compute calls (`llama_decode` and the wait for its results in
`llama_get_logits_ith`, `llama_process` for MTP, EAGLE-3 and DFlash heads): `in_llama()` reads
the running total.
A cycle's host time is its wall time less what llama.cpp took during it, split by part:

- `sampling`: the verify walk over the target's rows (argmax, or the processed distribution,
  acceptance and the residual draw) and the bonus token;
- `draft`: the drafter's own work outside llama.cpp (its sampling, lookups, hidden-row copies);
- `rollback`: dropping the rejected tokens (`llama_memory_seq_rm`, recurrent-state snapshots);
- `bookkeeping`: the rest of the loop (batches, text, stats, K = auto).

Thread-local, so two generators in two threads (the chat and a side-by-side re-run) never mix
their figures. The clock is wall time (`time.perf_counter`); `scripts/bench_host.py` may switch
to the thread's CPU time (`use_clock(time.thread_time)`), which a busy machine's preemptions do
not inflate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

_local = threading.local()
now = time.perf_counter
"""The clock every figure here is read on."""

PARTS = ("sampling", "draft", "rollback", "bookkeeping")


def in_llama() -> float:
    """Seconds this thread has spent inside llama.cpp's compute calls so far."""
    return getattr(_local, "seconds", 0.0)


def add_llama(started: float) -> None:
    """Count the time since `started` (a `now()` reading) as llama.cpp's."""
    _local.seconds = in_llama() + now() - started


def use_clock(clock: Callable[[], float]) -> None:
    """Read every figure on `clock` from here on (benchmarks: `time.thread_time`)."""
    global now
    now = clock


@dataclass(frozen=True)
class HostCost:
    """One cycle's host seconds by part, and the seconds llama.cpp computed during it."""

    sampling: float = 0.0
    draft: float = 0.0
    rollback: float = 0.0
    bookkeeping: float = 0.0
    llama: float = 0.0

    @property
    def host(self) -> float:
        """Everything outside llama.cpp's compute calls."""
        return self.sampling + self.draft + self.rollback + self.bookkeeping

    def __add__(self, other: HostCost) -> HostCost:
        return HostCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def per_cycle_ms(self, cycles: int) -> dict[str, float]:
        """Milliseconds per cycle: `host` and each part of it, and `llama` beside them."""
        n = max(cycles, 1)
        parts = {part: round(getattr(self, part) * 1000 / n, 4) for part in PARTS}
        return {"host": round(self.host * 1000 / n, 4), **parts, "llama": round(self.llama * 1000 / n, 4)}


class Laps:
    """A stopwatch over one cycle: `lap(part)` books the time since the last lap to `part`, less
    what llama.cpp computed meanwhile (booked as `llama`)."""

    def __init__(self) -> None:
        self._seconds = dict.fromkeys((*PARTS, "llama"), 0.0)
        self._wall, self._llama = now(), in_llama()

    def lap(self, part: str) -> None:
        wall, llama = now(), in_llama()
        self._seconds["llama"] += llama - self._llama
        self._seconds[part] += (wall - self._wall) - (llama - self._llama)
        self._wall, self._llama = wall, llama

    def restart(self) -> None:
        """Start the next lap here, booking nothing (time another figure already counts)."""
        self._wall, self._llama = now(), in_llama()

    def cost(self) -> HostCost:
        return HostCost(**self._seconds)
