"""The promise a greedy reply keeps on every backend, proved on the scripted target with rounding
that depends on the pass's width (as a GPU's does): the step's decisions are exact against the
logits it was given, and where the speculative reply leaves speculation-off's text it is at a
near-tie, the two best logits within rounding of each other (tests/numerics.py,
`assert_same_or_near_tie`). The same check catches a divergence that is not rounding, a decision
that is not its row's argmax, and any divergence on a backend that must be batch-invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from numerics import RowRecorder, assert_same_or_near_tie, assert_same_proposal, logit_bound

from spectui.engine.doubles.scripted_drafter import ScriptedDrafter
from spectui.engine.doubles.scripted_target import ScriptedTarget
from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator
from spectui.engine.step import sampling

N_VOCAB = 256
MAX_TOKENS = 48
GREEDY = SamplingConfig(temperature=0.0)
PROMPTS = [[1, 2, 3, i] for i in range(4, 16)]
ROUNDING = 0.01
"""Per logit, for passes of more than one token: under `logit_bound` of these logits (0.5 % of
the largest, about 3, so ~0.015), and still enough to swap two logits that close about 1 token in 50."""


def script(context: Sequence[int]) -> np.ndarray:
    """Standard normal logits drawn from the last three tokens: every context its own (a bigram
    table's greedy chain falls into a short loop and meets few ties)."""
    return np.random.default_rng([3, *context[-3:]]).standard_normal(N_VOCAB)


def target(rounding: float = ROUNDING) -> ScriptedTarget:
    return ScriptedTarget(script, N_VOCAB, batch_rounding=rounding)


def truth_drafter(tgt: ScriptedTarget, miss_every: int = 3) -> ScriptedDrafter:
    """Proposes the 1-row greedy chain after the context, with every `miss_every`-th token wrong."""

    def script(ctx: Sequence[int], k: int) -> list[int]:
        out: list[int] = []
        for i in range(k):
            best = int(np.argmax(tgt.logits([*ctx, *out])))
            out.append((best + 1) % N_VOCAB if (len(ctx) + i) % miss_every == 0 else best)
        return out

    return ScriptedDrafter(script)


def reply(tgt: ScriptedTarget, prompt: list[int], k: int) -> tuple[list[int], dict]:
    gen = Generator(tgt, {"scripted": truth_drafter(tgt)}, "scripted")  # type: ignore[arg-type]
    with RowRecorder(tgt) as recorder:
        events = list(gen.generate(prompt, GenerationConfig(max_tokens=MAX_TOKENS, sampling=GREEDY), DraftControl(k)))
    final = events[-1]
    assert isinstance(final, Finished)
    return list(final.tokens), recorder.rows


def divergences(tgt: ScriptedTarget, k: int = 4, exact: bool = False) -> list[dict]:
    found = []
    for prompt in PROMPTS:
        baseline, base_rows = reply(tgt, prompt, 0)
        spec, spec_rows = reply(tgt, prompt, k)
        report = assert_same_or_near_tie(prompt, baseline, base_rows, spec, spec_rows, exact=exact,
                                         label=f"scripted, prompt {prompt}")
        if report is not None:
            found.append(report)
    return found


def test_with_batch_dependent_rounding_replies_leave_speculation_offs_only_at_near_ties() -> None:
    tgt = target()
    assert logit_bound(tgt.logits([1])) > ROUNDING, "precondition: the emulated rounding is within the bound"
    found = divergences(tgt)
    assert len(found) >= 2, "precondition: the emulated rounding makes some replies diverge"
    for report in found:
        assert report["rounding"] <= ROUNDING * 1.0001
        assert 0 <= report["margin_1row"] <= 2 * ROUNDING  # both sides took their own row's argmax
        assert report["margin_verify_row"] >= 0


def test_without_rounding_every_reply_is_speculation_offs() -> None:
    assert divergences(target(rounding=0.0), exact=True) == []


def test_a_batch_invariant_backend_allows_no_divergence() -> None:
    with pytest.raises(AssertionError, match="must not change with the pass's width"):
        divergences(target(), exact=True)


def test_rows_further_apart_than_rounding_are_caught() -> None:
    """A verify pass that computes something else (here: off by up to 0.5, far past rounding),
    as a cache that lost a token would: its divergences are not near-ties."""
    with pytest.raises(AssertionError, match="beyond rounding"):
        divergences(target(rounding=0.5))


def test_a_decision_that_is_not_its_rows_argmax_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that takes the second-best token where the best leads by little (a rule that is not
    exact against its logits) is caught, though its reply could pass for a near-tie's."""
    greedy = sampling.greedy

    def sloppy(logits: np.ndarray, cfg: SamplingConfig | None = None) -> int:
        top2 = np.argsort(logits)[-2:]
        return int(top2[0]) if logits[top2[1]] - logits[top2[0]] < 0.05 else greedy(logits, cfg)

    monkeypatch.setattr(sampling, "greedy", sloppy)
    with pytest.raises(AssertionError, match="not exact against its logits"):
        divergences(target(rounding=0.0))


# ----- a drafter's proposals at T > 0 (a head's state after rollbacks against a fresh one) -------


def proposals_parting_at_a_swap(second_row_shift: float) -> tuple[SimpleNamespace, SimpleNamespace]:
    """Two 2-token proposals drawn with one seed: the same first row; the second row's two best
    tokens 0.002 apart in one evaluation and swapped by rounding in the other (`second_row_shift`
    adds a real change to every logit of the second row on top)."""
    cfg = SamplingConfig(temperature=1.0)
    first = np.random.default_rng(1).standard_normal(N_VOCAB)
    second = np.random.default_rng(2).standard_normal(N_VOCAB)
    second[[5, 9]] = second.max() + 1.0, second.max() + 1.002
    rounded = second.copy()
    rounded[[5, 9]] = second[9], second[5]
    rounded += second_row_shift * np.random.default_rng(3).standard_normal(N_VOCAB)
    for seed in range(100):
        one, other = [], []
        for rows, out in ((first, second), one), ((first, rounded), other):
            rng = np.random.default_rng(seed)
            dists = [sampling.distribution(row, cfg) for row in rows]
            out.extend([[sampling.sample(d, rng) for d in dists], dists])
        if one[0] != other[0]:
            return SimpleNamespace(tokens=one[0], dists=one[1]), SimpleNamespace(tokens=other[0], dists=other[1])
    raise AssertionError("no seed draws two different tokens")


def test_proposals_may_part_where_rounding_swapped_two_near_equal_tokens() -> None:
    got, want = proposals_parting_at_a_swap(0.0)
    assert got.tokens[0] == want.tokens[0] and got.tokens[1] != want.tokens[1]
    assert assert_same_proposal(got, want, N_VOCAB, exact=False) == 1
    with pytest.raises(AssertionError, match="must draw the same tokens"):
        assert_same_proposal(got, want, N_VOCAB, exact=True)


def test_proposals_from_different_states_are_caught_where_they_part() -> None:
    """The second row moved by ~1 nat per logit, as a head fed the wrong row's features would."""
    got, want = proposals_parting_at_a_swap(1.0)
    with pytest.raises(AssertionError, match="beyond rounding"):
        assert_same_proposal(got, want, N_VOCAB, exact=False)
