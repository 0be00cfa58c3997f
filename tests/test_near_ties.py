"""The promise a greedy reply keeps on every backend, proved on the scripted target with rounding
that depends on the pass's width (as a GPU's does): the step's decisions are exact against the
logits it was given, and where the speculative reply leaves speculation-off's text it is at a
near-tie, the two best logits within rounding of each other (tests/numerics.py,
`assert_same_or_near_tie`). The same check catches a divergence that is not rounding, a decision
that is not its row's argmax, and any divergence on a backend that must be batch-invariant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numerics import RowRecorder, assert_same_or_near_tie, logit_bound

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
