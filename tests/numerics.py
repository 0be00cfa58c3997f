"""Comparing what llama.cpp computed along two paths, with bounds that hold on any host.

The same context evaluated through different batch shapes (one prompt batch, a verify pass of
K + 1 rows, single rows) is not bitwise the same: llama.cpp's CPU matmuls choose their kernels
and their order of summation by batch size and by the host's SIMD width (AVX2, AVX-512, NEON),
so float32 rounding differs. Seen on two x86-64 hosts of the CI machine kind: up to 1.2e-3
absolute on the tiny models' logits, whose largest magnitude is about 10. A cache that kept a
rejected token, lost an accepted one or read the wrong hidden row moves them by O(1).

So the bounds sit between the two, scaled by the logits' own size, and every comparison that
can says so: `wrong` is an evaluation of a *broken* state, which must land far outside the
bound, or the test could not tell a bug from rounding.
"""

from __future__ import annotations

import numpy as np

LOGIT_RTOL = 0.005
"""Cross-shape logit differences, as a fraction of the largest |logit|: 0.5 %, about 40 times
the rounding seen (1.2e-3 of ~10), and still a fifth or less of what a cache that lost one
token some positions back does (1.5 on logits of ~18: test_engine)."""
SEPARATION = 5.0
"""A broken state must differ by at least this many bounds."""
DIST_TV = 0.01
"""Total variation between two evaluations of one distribution. A relative logit error e
changes each probability by about e·|logit|/T of itself; 1.2e-3 at T = 1 gives ~0.1 % of the
mass, and a head fed the wrong row gives a different distribution (TV ~ 0.3 and more)."""


def logit_bound(expected: np.ndarray) -> float:
    return LOGIT_RTOL * max(float(np.max(np.abs(expected))), 1.0)


def assert_same_evaluation(actual: np.ndarray, expected: np.ndarray, wrong: np.ndarray | None = None) -> None:
    """`actual` and `expected` are one context's logits from two paths; `wrong`, if given, the
    logits of a state a bug would leave (it must be told apart from rounding)."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    bound = logit_bound(expected)
    diff = float(np.max(np.abs(actual - expected)))
    assert diff <= bound, f"logits differ by {diff:.3g}, beyond rounding across batch shapes ({bound:.3g})"
    top2 = np.sort(expected.ravel())[-2:]
    if top2[1] - top2[0] > 2 * bound:  # no near-tie: the greedy token must be the same
        assert int(np.argmax(actual)) == int(np.argmax(expected))
    if wrong is not None:
        off = float(np.max(np.abs(np.asarray(wrong, dtype=np.float64) - expected)))
        assert off > SEPARATION * bound, f"a broken state is only {off:.3g} off: the bound {bound:.3g} proves nothing"


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


def assert_same_distribution(got: np.ndarray, want: np.ndarray) -> None:
    """Two dense evaluations of one next-token distribution (e.g. a head's q after rollbacks
    and from a fresh head)."""
    tv = total_variation(got, want)
    assert tv <= DIST_TV, f"distributions differ by TV {tv:.3g}, beyond rounding ({DIST_TV})"
