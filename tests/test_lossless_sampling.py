"""At T > 0 the speculative step must emit tokens distributed exactly as the target's own.

We run many independent speculative steps from one context and compare the empirical
distribution of the first and second emitted tokens with the target's exact processed
distribution (a fresh evaluation), using a chi-square goodness-of-fit test. The first position
is an accepted draft token or a residual resample; the second is an accepted token, a resample
or the bonus token. The same test run with a deliberately wrong acceptance rule (always accept)
must reject, which shows the test has the power to catch a broken rule.
"""

from __future__ import annotations

import numpy as np
import pytest
from lossless import (
    N_STEPS,
    PROCESSED,
    PROMPT,
    PURE,
    DrawnFrom,
    assert_an_always_accept_rule_is_caught,
    assert_reproduces_the_target,
    check_lossless,
    chi_square_pvalue,
    exact_distribution,
)
from numerics import logit_bound

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step import sampling, speculative
from spectui.engine.step.drafter import FixedBudget


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


class Nudged:
    """A target whose rows carry one token's logit `delta` further: a batch-variant backend's
    rounding (within `logit_bound`) or, far past it, a state that is not the context's."""

    def __init__(self, model: LlamaModel, token: int, delta: float) -> None:
        self.model, self.token, self.delta = model, token, delta

    def extend(self, tokens, n_logits: int = 1):
        rows = np.array(self.model.extend(tokens, n_logits), dtype=np.float32)
        rows[:, self.token] += self.delta
        return rows

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def nudged_samples(tiny_pair, delta_in_bounds: float, n: int):
    """Plain T = 1 draws (no drafter: every token from a verify row) with min-p's cut set a
    quarter of the rounding bound under a token of ~0.8 % of the mass (a TV under the CPU's
    0.01), and that token's logit nudged by `delta_in_bounds` bounds."""
    with LlamaModel.load(tiny_pair.target, n_ctx=256) as model:
        context = model.tokenize(PROMPT)
        fresh = model.sync(context).copy()
        probs = sampling.distribution(fresh, PURE).dense(fresh.shape[-1])
        token = int(np.argmin(np.abs(probs - 0.008)))
        bound = logit_bound(fresh)
        cfg = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0,
                             min_p=float(np.exp(fresh[token] - fresh.max() - bound / 4)))
        target = Nudged(model, token, delta_in_bounds * bound)
        drawn, rng = DrawnFrom(target, context), np.random.default_rng(3)
        model.reset()
        model.sync(context[:-1])
        samples = [drawn.step(lambda: speculative.speculative_step(target, None, context, FixedBudget(0), cfg, rng))
                   .tokens[0] for _ in range(n)]
        return samples, drawn, cfg, token, context


def test_tokens_are_held_to_the_rows_they_were_drawn_from(tiny_pair):
    """A verify row rounded past a truncation cut (as a GPU's rows are, issue #39's H100 run):
    the draws follow that row, which is the promise; held to a fresh 1-row distribution the
    same draws would fail, so the check must read the rows the step was given."""
    samples, drawn, cfg, token, context = nudged_samples(tiny_pair, -0.5, N_STEPS)
    fresh = exact_distribution(tiny_pair, context, cfg)
    assert token in fresh.ids and token not in samples  # the cut moved: never drawn
    expected = drawn.expected(tiny_pair, cfg)
    assert token not in expected.ids
    assert chi_square_pvalue(samples, expected) > 0.001
    assert chi_square_pvalue(samples, fresh) < 0.001  # what assert_reproduces_the_target would say


def test_rows_further_from_the_context_than_rounding_are_caught(tiny_pair):
    """The rows are held to a fresh evaluation first: one from another state (a cache bug moves
    logits by O(1)) fails there, whatever the draws."""
    _, drawn, cfg, _, _ = nudged_samples(tiny_pair, 20.0, 50)
    with pytest.raises(AssertionError, match="beyond rounding"):
        drawn.expected(tiny_pair, cfg)
