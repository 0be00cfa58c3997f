"""The scripted target (a test double serving chosen logits, `engine/doubles/scripted_target.py`) is
faithful: the step makes against it exactly the decisions the rule says, read from the double's
own distributions, and a step with a wrong rule is caught. So a test of the loop's decisions (or
of the UI above it) may run on the double in microseconds; what needs llama.cpp itself (rollback
in its caches, batch shapes, a GGUF's vocabulary) stays with the tiny real models.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from lossless import PROCESSED, chi_square_pvalue

from spectui.engine.doubles.scripted_drafter import ScriptedDrafter
from spectui.engine.doubles.scripted_target import ScriptedTarget, bigram_script
from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator
from spectui.engine.step import sampling, speculative
from spectui.engine.step.drafter import FixedBudget
from spectui.errors import ContextFullError

N_VOCAB = 32
N_STEPS = 4000
GREEDY = SamplingConfig(temperature=0.0)
PURE = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)

CONTEXT = [3, 7, 11]


def greedy_chain(target: ScriptedTarget, context: Sequence[int], n: int) -> list[int]:
    """The double's argmax tokens after `context`, read from its script directly (not the step)."""
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(target.logits([*context, *out]))))
    return out


def test_greedy_step_accepts_exactly_the_argmax_prefix_and_rolls_back_the_rest() -> None:
    target = ScriptedTarget(bigram_script(N_VOCAB, seed=1), N_VOCAB)
    rng = np.random.default_rng(5)
    context = list(CONTEXT)
    target.sync(context[:-1])
    seen: Counter[int] = Counter()
    for _ in range(300):
        k = int(rng.integers(1, 6))
        truth = greedy_chain(target, context, k + 1)
        miss = int(rng.integers(0, k + 1))  # k: no miss, every token is the argmax
        proposal = list(truth[:k])
        if miss < k:
            proposal[miss] = (truth[miss] + int(rng.integers(1, N_VOCAB))) % N_VOCAB
        passes = target.passes
        step = speculative.speculative_step(target, ScriptedDrafter(lambda ctx, kk, p=proposal: p), context,
                                            FixedBudget(k), GREEDY, rng)
        assert step.accepted == miss  # accepted iff each token is the argmax after the ones before
        assert step.tokens == truth[: miss + 1]  # then the argmax: a correction, or the bonus token
        assert target.passes == passes + 1  # one target pass per cycle
        assert target.cached == [*context, *truth[:miss]]  # last + the accepted kept; the rest rolled back
        seen[miss] += 1
        context += step.tokens
    assert set(seen) == set(range(6))


def sampled_first_tokens(target: ScriptedTarget, q_script, seed: int = 11) -> tuple[list[int], int]:
    """N_STEPS steps from CONTEXT, the drafter drawing 2 tokens from q: the first emitted tokens,
    and how often the first draft token was accepted."""
    rng = np.random.default_rng(seed)
    draft_rng = np.random.default_rng(seed + 1)

    def script(ctx: Sequence[int], k: int) -> list[tuple[int, sampling.Dist]]:
        out: list[tuple[int, sampling.Dist]] = []
        for _ in range(k):
            q = sampling.distribution(q_script([*ctx, *(t for t, _ in out)]).astype(np.float32), PURE)
            out.append((int(draft_rng.choice(q.ids, p=q.probs)), q))
        return out

    drafter = ScriptedDrafter(script)
    target.sync(CONTEXT[:-1])
    firsts, accepted = [], 0
    for _ in range(N_STEPS):
        step = speculative.speculative_step(target, drafter, CONTEXT, FixedBudget(2), PURE, rng)
        firsts.append(step.tokens[0])
        accepted += step.accepted >= 1
    return firsts, accepted


def overlap(target: ScriptedTarget, q_script) -> float:
    """P(the first draft token is accepted) = sum over x of min(p(x), q(x))."""
    p = sampling.distribution(target.logits(CONTEXT), PURE).dense(N_VOCAB)
    q = sampling.distribution(q_script(CONTEXT).astype(np.float32), PURE).dense(N_VOCAB)
    return float(np.minimum(p, q).sum())


def test_sampled_step_keeps_the_doubles_distribution_and_accepts_at_the_rules_rate() -> None:
    target = ScriptedTarget(bigram_script(N_VOCAB, seed=1), N_VOCAB)
    q_script = bigram_script(N_VOCAB, seed=2)
    firsts, accepted = sampled_first_tokens(target, q_script)
    p = sampling.distribution(target.logits(CONTEXT), PURE)
    assert p.top_prob() < 0.5, "precondition: a spread-out target"
    assert chi_square_pvalue(firsts, p) > 0.001
    rate = overlap(target, q_script)
    assert 0.2 < rate < 0.9, "precondition: the drafter agrees with the target sometimes"
    assert abs(accepted / N_STEPS - rate) < 4 * np.sqrt(rate * (1 - rate) / N_STEPS)  # 4 sigma


@pytest.mark.parametrize("wrong", [lambda p_d, q_d, u: u < p_d, lambda p_d, q_d, u: True],
                         ids=["q-ignored", "always-accepted"])
def test_the_check_catches_a_wrong_acceptance_rule(monkeypatch: pytest.MonkeyPatch, wrong) -> None:
    monkeypatch.setattr(speculative, "accept_draft_token", wrong)
    target = ScriptedTarget(bigram_script(N_VOCAB, seed=1), N_VOCAB)
    firsts, _ = sampled_first_tokens(target, bigram_script(N_VOCAB, seed=2))
    assert chi_square_pvalue(firsts, sampling.distribution(target.logits(CONTEXT), PURE)) < 1e-6


def test_the_check_catches_a_residual_that_keeps_the_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    target = ScriptedTarget(bigram_script(N_VOCAB, seed=1), N_VOCAB)
    firsts, _ = sampled_first_tokens(target, bigram_script(N_VOCAB, seed=2))
    assert chi_square_pvalue(firsts, sampling.distribution(target.logits(CONTEXT), PURE)) < 1e-6


def test_point_mass_proposals_keep_the_processed_distribution() -> None:
    """Moved from test_drafters_scripted.py's real-target check at T 0.8 with top-k, top-p and
    min-p (the T 1 check stays there, on llama.cpp's rows): the same proposal (the target's own
    greedy tokens, q = None), the same steps, the same assertions, on the double."""
    target = ScriptedTarget(bigram_script(64, seed=6, temperature=0.5), 64)
    context = [5, 9, 13]
    proposal = greedy_chain(target, context, 2)
    drafter = ScriptedDrafter(lambda ctx, k: proposal)
    target.sync(context[:-1])
    rng = np.random.default_rng(7)
    outputs, kinds = [], Counter()
    for _ in range(N_STEPS):
        step = speculative.speculative_step(target, drafter, context, FixedBudget(len(proposal)), PROCESSED, rng)
        outputs.append(step.tokens)
        kinds["accepted_first"] += step.accepted >= 1
        kinds["rejected_first"] += step.accepted == 0
    assert kinds["accepted_first"] > N_STEPS * 0.1 and kinds["rejected_first"] > N_STEPS * 0.1
    first = [out[0] for out in outputs]
    p_first = chi_square_pvalue(first, sampling.distribution(target.logits(context), PROCESSED))
    second = [out[1] for out in outputs if out[0] == proposal[0] and len(out) > 1]
    p_second = chi_square_pvalue(second, sampling.distribution(target.logits([*context, proposal[0]]), PROCESSED))
    assert p_first > 0.001, f"first token does not follow the target's distribution (p={p_first:.2g})"
    assert p_second > 0.001, f"second token does not follow the target's distribution (p={p_second:.2g})"


@pytest.mark.parametrize("miss_every", [1, 2, 3, 7])
def test_the_loop_on_the_double_writes_its_greedy_chain_whatever_is_proposed(miss_every: int) -> None:
    """The generation loop (prefill, cycles, stops, stats) runs on the double as on a real target."""
    target = ScriptedTarget(bigram_script(N_VOCAB, seed=4), N_VOCAB)
    prompt = [1, 2, 3, 4]
    truth = greedy_chain(target, prompt, 40)

    def script(ctx: Sequence[int], k: int) -> list[int]:
        start = len(ctx) - len(prompt)
        return [(t + 1) % N_VOCAB if (start + i) % miss_every == 0 else t
                for i, t in enumerate(truth[start:start + k])]

    gen = Generator(target, {"scripted": ScriptedDrafter(script)}, "scripted")  # type: ignore[arg-type]
    events = list(gen.generate(prompt, GenerationConfig(max_tokens=32, sampling=GREEDY), DraftControl(4)))
    final = events[-1]
    assert isinstance(final, Finished) and list(final.tokens) == truth[:32]
    assert final.text == "".join(f" t{t}" for t in truth[:32])
    if miss_every > 1:
        assert 0 < final.stats.acceptance_rate < 1
    else:
        assert final.stats.acceptance_rate == 0


def test_the_double_refuses_what_a_real_target_cannot_do() -> None:
    target = ScriptedTarget(bigram_script(N_VOCAB), N_VOCAB, n_ctx=8)
    target.sync([1, 2, 3])
    with pytest.raises(ContextFullError):
        target.extend([4] * 6)
    with pytest.raises(ValueError, match="n_logits"):
        target.extend([4], n_logits=2)
    wrong = ScriptedTarget(lambda ctx: np.zeros(5), N_VOCAB)
    with pytest.raises(ValueError, match="shape"):
        wrong.sync([1])
