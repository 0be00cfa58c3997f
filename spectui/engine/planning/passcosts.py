"""What passes cost, learned online: a drafter's calls and the target's verify passes (K = auto).

`_Running` fits seconds = c_call + c_unit · work over recent observations (a drafter's calls:
work is its forward passes). `VerifyCosts` keeps the target's pass cost per batch size (the
median of each size's last few passes, sizes not seen for a while dropped) and a line fitted to
the recent passes of every size, whose slope is what one more verify row costs (autodraft.py
explains why both).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median

DECAY = 0.9  # weight of history in the cost estimates (about the last 10 observations)
VERIFY_WINDOW = 5  # passes per batch size whose median prices that size
STALE_PASSES = 200  # a batch size not verified for this many passes leaves the table
UNSEEN_ROW_COST = 0.05  # with one batch size measured: each further row costs 5 % of it
MEASURE_GAP = 4
"""Sizes measured this far apart are close enough: `unmeasured` asks for none between them."""


@dataclass
class _Running:
    """An exponentially weighted least-squares fit of seconds = c_call + c_unit · work."""

    n: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    xy: float = 0.0
    _fitted: tuple[float, float] | None = field(default=None, repr=False, compare=False)
    """`coefficients` as of the last `add` (K = auto asks for them hundreds of times a cycle)."""

    def add(self, work: float, seconds: float) -> None:
        for name, value in (("n", 1.0), ("x", work), ("y", seconds), ("xx", work * work),
                            ("xy", work * seconds)):
            setattr(self, name, DECAY * getattr(self, name) + value)
        self._fitted = None

    def coefficients(self) -> tuple[float, float]:
        """(c_call, c_unit), both ≥ 0; (0, 0) before anything is measured."""
        if self._fitted is None:
            self._fitted = self._fit()
        return self._fitted

    def _fit(self) -> tuple[float, float]:
        if self.n <= 0:
            return 0.0, 0.0
        mean_x, mean_y = self.x / self.n, self.y / self.n
        var = self.xx / self.n - mean_x * mean_x
        if var > 1e-6 * max(mean_x * mean_x, 1.0):
            unit = max((self.xy / self.n - mean_x * mean_y) / var, 0.0)
            return max(mean_y - unit * mean_x, 0.0), unit
        if mean_x > 0:  # always the same amount of work: charge it all per unit
            return 0.0, mean_y / mean_x
        return mean_y, 0.0


class VerifyCosts:
    """Seconds of a target pass per batch size: the median of each size's last few passes, and a
    line fitted to the recent passes of every size (what one more row costs)."""

    def __init__(self) -> None:
        self._passes: dict[int, deque[float]] = {}
        self._medians: dict[int, float] = {}
        self._seen: dict[int, int] = {}
        self._count = 0
        self._fresh: dict[int, float] | None = None
        self._fit = _Running()
        self._priced: dict[int, float] = {}
        """`seconds(rows)` as of the last `add`: K = auto prices every K it weighs, every cycle."""

    def add(self, rows: int, seconds: float) -> None:
        passes = self._passes.setdefault(rows, deque(maxlen=VERIFY_WINDOW))
        passes.append(seconds)
        self._medians[rows] = median(passes)
        self._count += 1
        self._seen[rows] = self._count
        self._fresh = None
        self._priced.clear()
        self._fit.add(rows, seconds)

    def __bool__(self) -> bool:
        return bool(self._passes)

    def table(self) -> dict[int, float]:
        """Seconds per batch size verified in the last `STALE_PASSES` passes, and one row's
        whenever measured (the caller must not change it)."""
        if self._fresh is None:
            self._fresh = {rows: seconds for rows, seconds in self._medians.items()
                           if rows == 1 or self._count - self._seen[rows] < STALE_PASSES}
        return self._fresh

    def row_seconds(self) -> float | None:
        """What one more row adds to a pass (the fitted slope), None while every recent pass had
        the same number of rows."""
        if self._fit.n <= 0:
            return None
        mean = self._fit.x / self._fit.n
        if self._fit.xx / self._fit.n - mean * mean <= 1e-6 * max(mean * mean, 1.0):
            return None
        return self._fit.coefficients()[1]

    def unmeasured(self, longest: int) -> int | None:
        """The middle of the widest gap between the sizes measured up to `longest` rows (and
        `longest` itself), when it is wider than `MEASURE_GAP`; else None. Between two measured
        sizes `seconds` draws a straight line, along which the longer size always looks best, and
        past them a slope fitted over every size; a pass's cost per row need be neither
        (docs/BENCHMARKS.md: at 2 threads a 20-row pass gave more tokens a second than a 32-row
        one), so the sizes between are worth one pass each."""
        sizes = sorted({*(rows for rows in self.table() if rows <= longest), longest})
        gaps = [(hi - lo, lo, hi) for lo, hi in pairwise(sizes)]
        if not gaps:
            return None
        width, lo, hi = max(gaps)
        return (lo + hi) // 2 if width > MEASURE_GAP else None

    def seconds(self, rows: int) -> float:
        """Seconds of a pass over `rows` rows: measured, else from the measured neighbours, else
        past the sizes measured the recent passes' slope (`UNSEEN_ROW_COST` per row without one)."""
        priced = self._priced.get(rows)
        if priced is None:
            priced = self._priced[rows] = self._interpolate(rows)
        return priced

    def _interpolate(self, rows: int) -> float:
        table = self.table()
        if rows in table:
            return table[rows]
        below = [n for n in table if n < rows]
        above = [n for n in table if n > rows]
        if below and above:
            lo, hi = max(below), min(above)
            return table[lo] + (table[hi] - table[lo]) * (rows - lo) / (hi - lo)
        nearest = max(below) if below else min(above)
        slope = self.row_seconds()
        if slope is None:
            return table[nearest] * (1 + UNSEEN_ROW_COST * (rows - nearest))
        return max(table[nearest] + max(slope, 0.0) * (rows - nearest), 0.0)
