"""DeepSeek-V4 DSpark heads (DSpark with DeepSeek-V4 stages for decoder layers: hyper-connections,
MLA, MoE, a sliding-window cache) on real llama.cpp, with a tiny generated head
(tests/tiny_dspark_v4.py) on the tiny bigram targets: they draft as `dspark` through the same
drafter, greedy speculation equals the target alone, rejection sampling reproduces the target (and
the same check catches an always-accept rule). Agreement with llama.cpp's own driver, position by
position: tests/test_scripts.py (scripts/bench_heads.py --kind dspark-v4)."""

from __future__ import annotations

from pathlib import Path

import lossless
import pytest
import tiny_bigram
import tiny_dspark_v4
from head_runs import (
    PROMPTS,
    THREADS,
    greedy_acceptance,
    load,
    pair,
    run,
    tiny_targets,
    use_the_hybrid_target,
    write_heads,
)

from spectui.engine.config import AUTO
from spectui.engine.drafters import DrafterSpec
from spectui.engine.generator import load_generator
from spectui.engine.heads import read_head
from spectui.errors import IncompatibleDraftError

TARGETS = ("llama", "qwen35")


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tiny_bigram.BigramTarget]:
    return tiny_targets(tmp_path_factory.mktemp("dspark-v4"))


@pytest.fixture(scope="module")
def heads(targets) -> dict[tuple[str, str], Path]:
    return write_heads(targets, {"dspark": tiny_dspark_v4.write_dspark_v4_head})


def test_a_deepseek_v4_dspark_head_drafts_as_dspark(targets, heads):
    facts = read_head(heads["dspark", "llama"])
    assert (facts.drafter, facts.stages, facts.stages_misfit, facts.max_draft) == ("dspark", 4, None, 8)
    gen = load(targets, heads, "dspark", "llama")
    try:
        assert gen.default_kind == "dspark" and gen.notes == []
        assert gen.label() == "DSpark head dspark-llama.gguf" and gen.drafters["dspark"].max_k == 8
    finally:
        gen.close()


@pytest.mark.parametrize("target", TARGETS)
def test_greedy_speculation_equals_the_target_alone(targets, heads, target):
    gen = load(targets, heads, "dspark", target)
    try:
        for prompt in PROMPTS:
            baseline = run(gen, prompt, 0)
            for k in [1, 3, 8, AUTO]:
                assert run(gen, prompt, k).tokens == baseline.tokens, f"{target}, K={k} diverged on {prompt!r}"
        acceptance, drafted = greedy_acceptance(gen, ks=(1, 3, 6))
    finally:
        gen.close()
    assert drafted >= 200
    assert 0.1 < acceptance < 0.6, f"{target}: per-token greedy acceptance {acceptance:.2f}"


def test_the_stages_decide_the_draft(targets, tmp_path):
    """The same head with its stages' weights near zero (the Markov head and the lm head alone)
    drafts differently: what the stages read (the injected features, the block) counts."""
    target = targets["llama"]
    rates = []
    for scale in (0.0, 1.0):
        path = tiny_dspark_v4.write_dspark_v4_head(tmp_path / f"v4-{scale}.gguf", target, stage_scale=scale)
        gen = load_generator(target.path, DrafterSpec("dspark", path), n_ctx=1024, n_threads=THREADS)
        try:
            rates.append(greedy_acceptance(gen, ks=(3,))[0])
        finally:
            gen.close()
    assert abs(rates[0] - rates[1]) > 0.1, rates


@pytest.mark.parametrize("cfg", [lossless.PURE, lossless.PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
def test_rejection_sampling_with_the_head_reproduces_the_target(targets, heads, cfg, monkeypatch):
    use_the_hybrid_target(monkeypatch)
    lossless.assert_reproduces_the_target(pair(targets, heads, "dspark", "qwen35"), cfg)


def test_the_same_check_catches_an_always_accept_rule(targets, heads, monkeypatch):
    use_the_hybrid_target(monkeypatch)
    lossless.assert_an_always_accept_rule_is_caught(pair(targets, heads, "dspark", "qwen35"), monkeypatch)


@pytest.mark.parametrize(("shape", "why"), [
    ({"hc": 2}, "has 2 hyper-connection streams (dflash.hyper_connection.count), where its stages take 4"),
    ({"sliding_window": 0}, "has no sliding window (dflash.attention.sliding_window), which its stages keep their "
                            "cache in"),
])
def test_a_head_llama_cpp_would_abort_on_is_refused_before_it_loads(targets, tmp_path, shape, why):
    """llama-speculative-simple aborts on both (GGML_ASSERT(hc == 4), deepseek4.cpp:366;
    GGML_ASSERT(hparams.n_swa > 0), dflash.cpp:83): spectui refuses them from the header, in one line."""
    head = tiny_dspark_v4.write_dspark_v4_head(tmp_path / "bad.gguf", targets["llama"], **shape)
    with pytest.raises(IncompatibleDraftError) as caught:
        load_generator(targets["llama"].path, DrafterSpec("dspark", head), n_ctx=256, n_threads=THREADS)
    assert str(caught.value) == (f"bad.gguf is a DeepSeek-V4 DSpark head that {why}, on which llama.cpp would abort; "
                                 "convert it again with llama.cpp's converter")
