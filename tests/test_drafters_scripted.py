"""The step with a scripted drafter beside the real tiny target: any future drafter's contract.

The scripted drafter proposes tokens the test chooses, with no distribution (q = None): the
point-mass path every lookup drafter takes. At T > 0 a proposed d must be accepted with p(d) and,
on rejection, the token resampled from p with d removed, so that what comes out is distributed
exactly as the target's p; at T = 0 the output is the target's greedy output whatever is proposed.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from lossless import (
    GREEDY,
    N_STEPS,
    PROMPT,
    PURE,
    DrawnFrom,
    chi_square_pvalue,
    greedy_continuation,
    recorded_continuation,
)
from numerics import RowRecorder, assert_same_evaluation, assert_same_or_near_tie

from spectui.engine.doubles.scripted_drafter import ScriptedDrafter
from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step import sampling, speculative
from spectui.engine.step.drafter import FixedBudget


@pytest.fixture(scope="module")
def target(tiny_pair):
    model = LlamaModel.load(tiny_pair.target, n_ctx=512)
    yield model
    model.close()


def point_mass_samples(target: LlamaModel, context: list[int], proposal: list[int], cfg: SamplingConfig,
                       monkeypatch_rule=None) -> tuple[list[list[int]], Counter, DrawnFrom]:
    drafter = ScriptedDrafter(lambda ctx, k: proposal)
    target.reset()
    target.sync(context[:-1])
    rng = np.random.default_rng(7)
    outputs, kinds = [], Counter()
    drawn = DrawnFrom(target, context)
    for _ in range(N_STEPS):
        step = drawn.step(lambda: speculative.speculative_step(target, drafter, context, FixedBudget(len(proposal)),
                                                               cfg, rng))
        outputs.append(step.tokens)
        kinds["accepted_first"] += step.accepted >= 1
        kinds["rejected_first"] += step.accepted == 0
    return outputs, kinds, drawn


def check_point_mass(tiny_pair, target, cfg) -> tuple[float, float, Counter]:
    context = target.tokenize(PROMPT)
    proposal = greedy_continuation(tiny_pair.target, context, 2)  # the likeliest tokens: p ≈ 0.3-0.5
    outputs, kinds, drawn = point_mass_samples(target, context, proposal, cfg)
    first = [out[0] for out in outputs]
    p_first = chi_square_pvalue(first, drawn.expected(tiny_pair, cfg))
    second = [out[1] for out in outputs if out[0] == proposal[0] and len(out) > 1]
    p_second = chi_square_pvalue(second, drawn.expected(tiny_pair, cfg, (proposal[0],)))
    return p_first, p_second, kinds


@pytest.mark.parametrize("cfg", [PURE], ids=["T1-pure"])  # T 0.8 with top-k/p, min-p: test_scripted_target.py
def test_point_mass_proposals_keep_the_target_distribution(tiny_pair, target, cfg):
    p_first, p_second, kinds = check_point_mass(tiny_pair, target, cfg)
    assert kinds["accepted_first"] > N_STEPS * 0.1 and kinds["rejected_first"] > N_STEPS * 0.1
    assert p_first > 0.001, f"first token does not follow the target's distribution (p={p_first:.2g})"
    assert p_second > 0.001, f"second token does not follow the target's distribution (p={p_second:.2g})"


def test_the_check_catches_accepting_proposals_without_rejection_sampling(tiny_pair, target, monkeypatch):
    monkeypatch.setattr(speculative, "accept_draft_token", lambda p_d, q_d, u: True)
    p_first, _, kinds = check_point_mass(tiny_pair, target, PURE)
    assert kinds["rejected_first"] == 0
    assert p_first < 1e-6


def test_the_check_catches_resampling_from_p_with_the_proposal_left_in(tiny_pair, target, monkeypatch):
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    p_first, _, _ = check_point_mass(tiny_pair, target, PURE)
    assert p_first < 1e-6


def test_scripted_misses_are_rejected_where_scripted_and_the_verdict_is_fed_back(tiny_pair, target):
    """Greedy: the target's own tokens with one deliberate miss at position 3 of 5."""
    context = target.tokenize("The story of the wind")
    truth = greedy_continuation(tiny_pair.target, context, 6)
    wrong = (truth[2] + 1) % target.n_vocab
    drafter = ScriptedDrafter(lambda ctx, k: [*truth[:2], wrong, *truth[3:5]])
    target.reset()
    target.sync(context[:-1])
    step = speculative.speculative_step(target, drafter, context, FixedBudget(5), GREEDY, np.random.default_rng(0))
    assert step.accepted == 2 and step.tokens == truth[:3]  # two accepted, then the target's own
    (verdict,) = drafter.feedbacks
    assert (verdict.accepted, list(verdict.emitted), verdict.verify_rows) == (2, truth[:3], 6)
    # The rollback left exactly context + accepted in the cache: the next logits are a fresh
    # evaluation's (within rounding across batch shapes), and far from those of a cache that
    # kept the rejected token.
    after = target.extend([step.tokens[-1]]).copy()
    with LlamaModel.load(tiny_pair.target, n_ctx=512) as fresh:
        expected = fresh.sync([*context, *step.tokens]).copy()
        stale = fresh.sync([*context, *truth[:2], wrong, step.tokens[-1]]).copy()
    assert_same_evaluation(after[0], expected, wrong=stale)


@pytest.mark.parametrize("miss_every", [1, 2, 3, 7])
def test_greedy_output_is_the_targets_whatever_the_drafter_proposes(tiny_pair, target, miss_every):
    """The target's greedy reply token for token on the CPU; on a GPU, where a verify pass rounds
    unlike a 1-row pass, it may leave it only at a near-tie (numerics.assert_same_or_near_tie: an
    H200 left it at token 10 of this prompt, where the two best logits were 0.004 apart)."""
    prompt = target.tokenize("Hello there, what is in the")
    truth, truth_rows = recorded_continuation(tiny_pair.target, prompt, 40)
    offset = len(prompt)

    def script(ctx, k):  # the truth, corrupted at every `miss_every`-th position
        start = len(ctx) - offset
        return [(t + 1) % 200 if (start + i) % miss_every == 0 else t
                for i, t in enumerate(truth[start:start + k])]

    target.reset()
    gen = Generator(target, {"scripted": ScriptedDrafter(script)}, "scripted")
    with RowRecorder(target) as recorder:
        events = list(gen.generate(prompt, GenerationConfig(max_tokens=32, sampling=GREEDY), DraftControl(4)))
    final = events[-1]
    assert isinstance(final, Finished) and len(final.tokens) == 32
    assert_same_or_near_tie(prompt, truth[:32], truth_rows, final.tokens, recorder.rows,
                            label=f"miss every {miss_every}")
    if miss_every > 1:
        assert 0 < final.stats.acceptance_rate < 1
