"""A logit bias and a grammar (llama.cpp's grammar sampler) keep the output exactly the target's.

- The grammar is asked only about the best candidates first (`sampling._best`): the tokens kept
  must be exactly those a mask over the whole vocabulary keeps, for greedy, top-k and no top-k.
- Greedy output under a bias and a grammar is the target's alone, for every drafter.
- At T = 1 the speculative step, with p and q both biased, top-k'd and constrained (the target's
  grammar advanced row by row, the draft's a fork advanced along its proposal), emits tokens
  distributed as the target's processed distribution: chi-square, and an always-accept rule is
  caught by the same check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from lossless import chi_square_pvalue

from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import load_generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step import sampling, speculative
from spectui.engine.step.drafter import FixedBudget
from spectui.engine.step.grammar import Grammar, GrammarError

LETTERS = "root ::= [a-z ]+"
"""Lower-case letters and spaces: after "in the" the tiny target spreads over a few such tokens."""
N_STEPS = 3000
PROMPT = "in the"


def brute_force(logits: np.ndarray, cfg: SamplingConfig, grammar: Grammar) -> sampling.Dist:
    """The processed distribution with the grammar applied to every token first (the slow way)."""
    masked = sampling.biased(logits, cfg).astype(np.float32, copy=True)
    masked[~grammar.allowed(np.arange(masked.shape[-1]))] = -np.inf
    return sampling.distribution(masked, replace(cfg, logit_bias=(), constraint=None))


@pytest.mark.parametrize("cfg", [
    SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    SamplingConfig(temperature=0.8, top_k=5, top_p=0.95, min_p=0.05, logit_bias=((263, 2.0), (97, -np.inf))),
    SamplingConfig(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0),
], ids=["full-vocab", "top5-bias", "top40"])
def test_asking_the_grammar_about_the_best_candidates_keeps_what_a_full_mask_keeps(tiny_pair, cfg) -> None:
    with LlamaModel.load(tiny_pair.target, n_ctx=256) as target:
        grammar = Grammar.compile(target, LETTERS)
        context = target.tokenize(PROMPT)
        for step in range(6):
            logits = target.sync(context).copy()
            quick = sampling.distribution(logits, replace(cfg, constraint=grammar))
            slow = brute_force(logits, cfg, grammar)
            assert sorted(quick.ids.tolist()) == sorted(slow.ids.tolist())
            assert np.allclose(quick.probs[np.argsort(quick.ids)], slow.probs[np.argsort(slow.ids)])
            greedy = sampling.greedy(logits, replace(cfg, constraint=grammar))
            assert greedy == int(slow.ids[np.argmax(slow.probs)])
            if step == 0:  # precondition: the grammar changes the target's choice here
                assert greedy != int(np.argmax(logits)) and len(slow.ids) < target.n_vocab / 2
            token = int(quick.ids[step % len(quick.ids)])
            grammar.accept(token)
            context.append(token)
        grammar.close()


def test_a_grammar_that_does_not_parse_is_one_line(tiny_pair) -> None:
    with LlamaModel.load(tiny_pair.target, n_ctx=256) as target, pytest.raises(GrammarError, match="not valid GBNF"):
        Grammar.compile(target, "root ::= [a-z")


def greedy_reply(gen, k, drafter: str | None, cfg: SamplingConfig, prompt: list[int]) -> Finished:  # type: ignore[no-untyped-def]
    gen.reset()
    config = GenerationConfig(max_tokens=40, sampling=cfg)
    return next(e for e in gen.generate(prompt, config, DraftControl(k, drafter=drafter)) if isinstance(e, Finished))


def test_greedy_under_a_bias_and_a_grammar_is_the_targets_alone_for_every_drafter(tiny_pair) -> None:
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512)
    try:
        prompt = gen.target.tokenize(PROMPT)
        free = greedy_reply(gen, 0, None, SamplingConfig(), prompt).tokens
        cfg = SamplingConfig(grammar=LETTERS + ' "."', logit_bias=((free[0], -np.inf), (263, 1.5)))
        alone = greedy_reply(gen, 0, None, cfg, prompt)
        assert alone.tokens != free and free[0] not in alone.tokens
        assert all(ch.islower() or ch in " ." for ch in alone.text)
        drafted = 0
        for drafter in ("model", "ngram", "suffix", "model+suffix"):
            for k in (1, 3, "auto"):
                reply = greedy_reply(gen, k, drafter, cfg, prompt)
                assert reply.tokens == alone.tokens, (drafter, k)
                drafted += reply.stats.drafted
        assert drafted > 0
    finally:
        gen.close()


def constrained_steps(pair, cfg: SamplingConfig) -> tuple[list[list[int]], Counter, list[int]]:
    """N_STEPS speculative steps from one context, each with a fresh copy of the grammar."""
    gen = load_generator(pair.target, pair.draft, n_ctx=256)
    try:
        context = gen.target.tokenize(PROMPT)
        gen.target.sync(context[:-1])
        drafter = gen.drafter("model")
        drafter.prefill(context[:-1])
        root = Grammar.compile(gen.target, LETTERS)
        rng = np.random.default_rng(7)
        outputs, kinds = [], Counter()
        for _ in range(N_STEPS):
            state = root.fork()
            step = speculative.speculative_step(gen.target, drafter, context, FixedBudget(3),
                                                replace(cfg, constraint=state), rng)
            state.close()
            outputs.append(step.tokens)
            kinds["accepted_first" if step.accepted else "resampled_first"] += 1
        root.close()
        return outputs, kinds, context
    finally:
        gen.close()


def exact(pair, context: list[int], cfg: SamplingConfig) -> sampling.Dist:
    with LlamaModel.load(pair.target, n_ctx=256) as fresh:
        grammar = Grammar.compile(fresh, LETTERS)
        for token in context[len(fresh.tokenize(PROMPT)):]:
            grammar.accept(token)
        dist = sampling.distribution(fresh.sync(context).copy(), replace(cfg, constraint=grammar))
        grammar.close()
        return dist


def biased(pair) -> SamplingConfig:
    """T = 1, top-k 8, and a bias lifting the target's third allowed choice."""
    plain = SamplingConfig(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0)
    with LlamaModel.load(pair.target, n_ctx=256) as target:
        grammar = Grammar.compile(target, LETTERS)
        third = int(sampling.distribution(target.sync(target.tokenize(PROMPT)).copy(),
                                          replace(plain, constraint=grammar)).ids[2])
        grammar.close()
    return replace(plain, logit_bias=((third, 1.0),))


def test_sampling_under_bias_top_k_and_a_grammar_reproduces_the_target(tiny_pair) -> None:
    cfg = biased(tiny_pair)
    outputs, kinds, context = constrained_steps(tiny_pair, cfg)
    assert kinds["accepted_first"] > N_STEPS * 0.1 and kinds["resampled_first"] > N_STEPS * 0.1
    first = [out[0] for out in outputs]
    expected = exact(tiny_pair, context, cfg)
    assert len(expected.ids) >= 3 and expected.top_prob() < 0.7, "precondition: a spread-out target"
    assert chi_square_pvalue(first, expected) > 0.001
    mode = Counter(first).most_common(1)[0][0]
    second = [out[1] for out in outputs if out[0] == mode and len(out) > 1]
    assert chi_square_pvalue(second, exact(tiny_pair, [*context, mode], cfg)) > 0.001


def test_the_same_check_catches_an_always_accept_rule_under_a_grammar(tiny_pair, monkeypatch) -> None:
    monkeypatch.setattr(speculative, "accept_draft_token", lambda p_d, q_d, u: True)
    cfg = biased(tiny_pair)
    outputs, _, context = constrained_steps(tiny_pair, cfg)
    assert chi_square_pvalue([out[0] for out in outputs], exact(tiny_pair, context, cfg)) < 1e-6
