"""A Gemma 4 assistant sidecar drafting for its target on real llama.cpp (tiny generated
`gemma4` + `gemma4-assistant`, tests/tiny_gemma4.py): the assistant reads the target's own KV
cache, so these prove that its passes leave that cache as it was (greedy equivalence, the
target's logits after rollbacks) and that its q keeps sampling exact."""

from __future__ import annotations

import functools

import lossless
import pytest
import tiny_gemma4
from head_runs import greedy_acceptance, run
from mtp_runs import THREADS, MtpPair, first_proposal
from numerics import GreedyReference, assert_same_distribution, assert_same_evaluation
from tiny_gguf import TinyPair

from spectui.engine.drafters import DrafterSpec
from spectui.engine.generation_config import AUTO
from spectui.engine.generator import Generator, load_generator
from spectui.engine.model.llama_model import LlamaModel

PROMPTS = ["The story of the wind", "Once upon a time", "Hello there", "in the"]


@pytest.fixture(scope="module")
def gemma_pair(tmp_path_factory: pytest.TempPathFactory) -> TinyPair:
    return tiny_gemma4.write_gemma4_pair(tmp_path_factory.mktemp("gemma4"))


@pytest.fixture(scope="module")
def generator(gemma_pair) -> Generator:
    """What `spectui chat --target gemma4-target.gguf --draft mtp-gemma4-target.gguf` loads."""
    gen = load_generator(gemma_pair.target, DrafterSpec(draft=gemma_pair.draft), n_ctx=1024, n_threads=THREADS)
    yield gen
    gen.close()


def test_the_sidecar_drafts_as_mtp_on_the_targets_cache(generator):
    drafter = generator.drafters["mtp"]
    assert generator.default_kind == "mtp" and generator.notes == []
    assert generator.kinds == ["mtp", "ngram", "suffix", "mtp+ngram", "mtp+suffix"]
    assert generator.label() == "MTP assistant mtp-gemma4-target.gguf"
    assert drafter.head.shares_target_cache and not generator.target.mtp_loaded
    assert (generator.target.arch, generator.target.rollback) == ("gemma4", "kv")


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculation_with_the_assistant_equals_the_target_alone(generator, prompt):
    baseline = GreedyReference(generator.target, generator.target.tokenize(prompt),
                               lambda: run(generator, prompt, 0), label=repr(prompt))
    assert len(baseline.tokens) == 48
    for k in [1, 2, 3, AUTO]:
        baseline.check(lambda k=k: run(generator, prompt, k), label=f"K={k}")  # same, or a GPU's near-tie
    assert generator.drafters["mtp"].queue == []  # nothing to read: the cache is the target's


def test_greedy_acceptance_of_the_tiny_assistant_is_informative(generator):
    acceptance, drafted = greedy_acceptance(generator)
    assert drafted >= 200
    assert 0.2 < acceptance < 0.95, f"per-token greedy acceptance {acceptance:.2f}"


def test_target_and_assistant_after_rollbacks_equal_fresh_ones(gemma_pair):
    spec = DrafterSpec("mtp", gemma_pair.draft)
    gen = load_generator(gemma_pair.target, spec, n_ctx=1024, n_threads=THREADS)
    try:
        prompt = gen.target.tokenize(PROMPTS[0])
        run(gen, prompt, 3, max_tokens=40, temperature=1.0, seed=1)
        final = run(gen, prompt, 3, max_tokens=40, temperature=1.0, seed=2)
        context = [*prompt, *final.tokens]
        assert gen.target.cached == context[:-1]
        after = first_proposal(gen, context)
        assert gen.target.cached == context[:-1]  # the assistant's passes added nothing to it
        gen.drafters["mtp"].reset()  # nor does forgetting the assistant's state clear the target's
        logits = gen.target.extend(context[-1:])[-1].copy()
    finally:
        gen.close()
    with LlamaModel.load(gemma_pair.target, n_ctx=256, n_threads=THREADS) as fresh_target:
        assert_same_evaluation(logits, fresh_target.sync(context))
    fresh = load_generator(gemma_pair.target, spec, n_ctx=1024, n_threads=THREADS)
    try:
        fresh.target.sync(context[:-1])
        expected = first_proposal(fresh, context)
    finally:
        fresh.close()
    assert after.tokens == expected.tokens and len(after.tokens) == 3
    for got, want in zip(after.dists, expected.dists, strict=True):
        assert_same_distribution(got.dense(512), want.dense(512))


def use_the_gemma_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a context where the tiny gemma4 target is unsure, at both positions the check looks at
    (first: top p 0.10 at T = 1, 22 tokens left at T = 0.8 with top-k, top-p and min-p; second,
    after the likeliest first token: 3 tokens left, top 0.56)."""
    monkeypatch.setattr(lossless, "PROMPT", "The story of the wind")
    monkeypatch.setattr(lossless, "load_generator", functools.partial(load_generator, n_threads=THREADS))


@pytest.mark.parametrize("cfg", [lossless.PURE, lossless.PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
def test_rejection_sampling_with_the_assistant_reproduces_the_target(gemma_pair, cfg, monkeypatch):
    use_the_gemma_pair(monkeypatch)
    lossless.assert_reproduces_the_target(MtpPair(gemma_pair.target, DrafterSpec("mtp", gemma_pair.draft)), cfg)


def test_the_same_check_with_the_assistant_catches_an_always_accept_rule(gemma_pair, monkeypatch):
    use_the_gemma_pair(monkeypatch)
    pair = MtpPair(gemma_pair.target, DrafterSpec("mtp", gemma_pair.draft))
    lossless.assert_an_always_accept_rule_is_caught(pair, monkeypatch)
