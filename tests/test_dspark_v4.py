"""DeepSeek-V4 DSpark heads (DSpark with DeepSeek-V4 stages for decoder layers: hyper-connections,
MLA, MoE, a sliding-window cache) on real llama.cpp, with a tiny generated head
(tests/tiny_dspark_v4.py) on the tiny bigram targets: they draft as `dspark` through the same
drafter, their stages decide the draft, and the shapes llama.cpp aborts on are refused first.
Greedy equivalence and exactness (chi-square, always-accept caught): tests/test_dflash_variants.py
(`dspark-v4`); agreement with llama.cpp's own driver, position by position: tests/test_scripts.py
(scripts/bench_heads.py --kind dspark-v4)."""

from __future__ import annotations

import pytest
import tiny_bigram
import tiny_dspark_v4
from head_runs import THREADS, greedy_acceptance

from spectui.engine.drafters import DrafterSpec
from spectui.engine.files.heads import read_head
from spectui.engine.generator import load_generator
from spectui.errors import IncompatibleDraftError


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> tiny_bigram.BigramTarget:
    return tiny_bigram.llama_target(tmp_path_factory.mktemp("dspark-v4"))


def test_a_deepseek_v4_dspark_head_drafts_as_dspark(target, tmp_path):
    head = tiny_dspark_v4.write_dspark_v4_head(tmp_path / "dsv4.gguf", target)
    facts = read_head(head)
    assert (facts.drafter, facts.stages, facts.stages_misfit, facts.max_draft) == ("dspark", 4, None, 8)
    gen = load_generator(target.path, DrafterSpec("dspark", head), n_ctx=256, n_threads=THREADS)
    try:
        assert gen.default_kind == "dspark" and gen.notes == []
        assert gen.label() == "DSpark head dsv4.gguf" and gen.drafters["dspark"].max_k == 8
    finally:
        gen.close()


def test_the_stages_decide_the_draft(target, tmp_path):
    """The same head with its stages' weights near zero (the Markov head and the lm head alone)
    drafts differently: what the stages read (the injected features, the block) counts."""
    rates = []
    for scale in (0.0, 1.0):
        path = tiny_dspark_v4.write_dspark_v4_head(tmp_path / f"v4-{scale}.gguf", target, stage_scale=scale)
        gen = load_generator(target.path, DrafterSpec("dspark", path), n_ctx=1024, n_threads=THREADS)
        try:
            rates.append(greedy_acceptance(gen, ks=(3,))[0])
        finally:
            gen.close()
    assert abs(rates[0] - rates[1]) > 0.1, rates


@pytest.mark.parametrize(("shape", "why"), [
    ({"hc": 2}, "has 2 hyper-connection streams (dflash.hyper_connection.count), where its stages take 4"),
    ({"sliding_window": 0}, "has no sliding window (dflash.attention.sliding_window), which its stages keep their "
                            "cache in"),
])
def test_a_head_llama_cpp_would_abort_on_is_refused_before_it_loads(target, tmp_path, shape, why):
    """llama-speculative-simple aborts on both (GGML_ASSERT(hc == 4), deepseek4.cpp:366;
    GGML_ASSERT(hparams.n_swa > 0), dflash.cpp:83): spectui refuses them from the header, in one line."""
    head = tiny_dspark_v4.write_dspark_v4_head(tmp_path / "bad.gguf", target, **shape)
    with pytest.raises(IncompatibleDraftError) as caught:
        load_generator(target.path, DrafterSpec("dspark", head), n_ctx=256, n_threads=THREADS)
    assert str(caught.value) == (f"bad.gguf is a DeepSeek-V4 DSpark head that {why}, on which llama.cpp would abort; "
                                 "convert it again with llama.cpp's converter")
