"""At T > 0 the speculative step must emit tokens distributed exactly as the target's own.

We run many independent speculative steps from one context and compare the empirical
distribution of the first and second emitted tokens with the target's exact processed
distribution (a fresh evaluation), using a chi-square goodness-of-fit test. The first position
is an accepted draft token or a residual resample; the second is an accepted token, a resample
or the bonus token. The same test run with a deliberately wrong acceptance rule (always accept)
must reject, which shows the test has the power to catch a broken rule.
"""

from __future__ import annotations

import pytest
from lossless import (
    N_STEPS,
    PROCESSED,
    PURE,
    assert_an_always_accept_rule_is_caught,
    assert_reproduces_the_target,
    check_lossless,
)

from spectui.engine.step import sampling


@pytest.mark.parametrize("cfg", [PURE, PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
def test_rejection_sampling_reproduces_the_target_distribution(tiny_pair, cfg):
    assert_reproduces_the_target(tiny_pair, cfg)


def test_the_same_check_catches_an_always_accept_rule(tiny_pair, monkeypatch):
    assert_an_always_accept_rule_is_caught(tiny_pair, monkeypatch)


def test_the_same_check_catches_a_resample_from_p_instead_of_the_residual(tiny_pair, monkeypatch):
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    p_first, _, _ = check_lossless(tiny_pair, PURE)
    assert p_first < 1e-6, "resampling from p (not max(0, p - q)) over-weights draft tokens and must be caught"


def test_the_fast_top_k_path_keeps_the_loop_exact(tiny_pair, monkeypatch):
    """`sampling.distribution` takes its column-maxima path (issues #27, #39) only past 100k
    tokens; lowered to 0, with 2 stripes, the tiny models' 277-token rows take it, target and
    draft alike."""
    monkeypatch.setattr(sampling, "STRIPES", 2)
    monkeypatch.setattr(sampling, "FAST_FROM_VOCAB", 0)
    fast_rows = []
    by_columns = sampling._top_k_by_columns
    monkeypatch.setattr(sampling, "_top_k_by_columns", lambda row, k: fast_rows.append(k) or by_columns(row, k))
    assert_reproduces_the_target(tiny_pair, PROCESSED)
    assert len(fast_rows) > N_STEPS  # every step read at least one row on the fast path
