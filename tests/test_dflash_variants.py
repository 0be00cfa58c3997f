"""The DSpark and DFlash2 drafters on real llama.cpp, with tiny generated heads
(tests/tiny_dflash.py: the DFlash head plus a Markov head, or plus a selector lattice) on the tiny
bigram targets: greedy equivalence, exactness at T > 0 (chi-square, and an always-accept rule
that the same check catches), the Markov correction of q, and the one-line fit checks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import lossless
import numpy as np
import pytest
import tiny_bigram
import tiny_dflash
import tiny_dspark_v4
from head_runs import (
    PROMPTS,
    THREADS,
    StopBelow,
    greedy_acceptance,
    load,
    pair,
    run,
    tiny_targets,
    use_the_hybrid_target,
    write_heads,
)

from spectui.cli import main
from spectui.engine.drafters import DrafterSpec
from spectui.engine.drafters.dspark import MarkovHead
from spectui.engine.files.gguf_file import read_header
from spectui.engine.files.heads import HeadFacts, TargetFacts, misfit, read_head
from spectui.engine.generation_config import AUTO, SamplingConfig
from spectui.engine.generator import load_generator
from spectui.engine.step.drafter import FixedBudget
from spectui.session import memory

KINDS = ("dspark", "dflash2")
HEADS = (*KINDS, "dspark-v4")
"""The heads the greedy and exactness checks run on: each kind's, and a DSpark head with DeepSeek-V4
stages (tests/tiny_dspark_v4.py; its own checks: tests/test_dspark_v4.py)."""
TARGETS = ("llama", "qwen35")
WRITERS = {"dspark": tiny_dflash.write_dspark_head, "dflash2": tiny_dflash.write_dflash2_head,
           "dspark-v4": tiny_dspark_v4.write_dspark_v4_head}
LABELS = {"dspark": "DSpark head", "dflash2": "DFlash2 head"}
LLAMA = TargetFacts("llama", 64, 4)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tiny_bigram.BigramTarget]:
    return tiny_targets(tmp_path_factory.mktemp("variants"))


@pytest.fixture(scope="module")
def heads(targets) -> dict[tuple[str, str], Path]:
    return write_heads(targets, WRITERS)


# ----- what loads ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_head_named_by_draft_drafts_as_its_own_kind(targets, heads, kind):
    gen = load(targets, heads, kind, "llama")
    try:
        assert gen.default_kind == kind and gen.notes == []
        assert gen.kinds == [kind, "ngram", "suffix", f"{kind}+ngram", f"{kind}+suffix"]
        assert gen.label() == f"{LABELS[kind]} {kind}-llama.gguf"
        # block_size 8: DSpark's anchor-first block drafts from every row, DFlash2's from rows 1..7
        assert gen.drafters[kind].max_k == (8 if kind == "dspark" else 7)
    finally:
        gen.close()


def test_a_plain_dflash_kind_names_the_kind_a_variant_head_drafts_as(targets, heads):
    gen = load_generator(targets["llama"].path, DrafterSpec("dflash", heads["dspark", "llama"]), n_ctx=256,
                         n_threads=THREADS)
    try:
        assert gen.notes == ["a DFlash head is off: dspark-llama.gguf is a DSpark head: it drafts as --drafter dspark"]
        assert gen.default_kind == "dspark"
    finally:
        gen.close()


# ----- greedy equivalence ------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", HEADS)
def test_greedy_speculation_equals_the_target_alone(targets, heads, kind, target):
    gen = load(targets, heads, kind, target)
    try:
        for prompt in PROMPTS:
            baseline = run(gen, prompt, 0)
            for k in [1, 3, 8, AUTO]:
                spec = run(gen, prompt, k)
                assert spec.tokens == baseline.tokens, f"{kind} on {target}, K={k} diverged on {prompt!r}"
        acceptance, drafted = greedy_acceptance(gen, ks=(1, 3, 6))
    finally:
        gen.close()
    assert drafted >= 200
    assert 0.15 < acceptance < 0.9, f"{kind} on {target}: per-token greedy acceptance {acceptance:.2f}"


def test_the_markov_head_carries_the_chain_down_the_block(targets, tmp_path):
    """Without its Markov head the same DSpark block drafts clearly worse past its first row: the
    chain (row i biased by the token drafted before it) is what the rows after the first read."""
    target = targets["llama"]
    rates = {}
    for rank in (16, 0):
        spec = tiny_dflash.DFlashSpec(markov_rank=rank, sample_from_anchor=True if rank else None)
        path = tiny_dflash.write_dflash_head(tmp_path / f"markov-{rank}.gguf", target, spec)
        kind = "dspark" if rank else "dflash"
        gen = load_generator(target.path, DrafterSpec(kind, path), n_ctx=1024, n_threads=THREADS)
        try:
            rates[kind] = greedy_acceptance(gen, ks=(6,))[0]
        finally:
            gen.close()
    assert rates["dspark"] > rates["dflash"] + 0.05, rates


def test_the_confidence_head_stops_a_greedy_draft_where_llama_cpp_would(targets, tmp_path):
    """With a confidence head, a T = 0 draft's confidence in row i is sigmoid(conf_proj . [state_i;
    W1[prev_i]] + b), prev_i the token the graph chained row i on, and it stops at the first row
    below p_min (speculative.cpp:1212-1220); the tiny head's conf_proj reads W1[prev] only, so the
    rows' confidences follow from its weights and the head's logits."""
    target = targets["llama"]
    spec = tiny_dflash.DFlashSpec(markov_rank=16, confidence=True)
    path = tiny_dflash.write_dflash_head(tmp_path / "dspark-conf.gguf", target, spec)
    assert read_head(path).confidence_head
    weights = tiny_dflash.head_weights(target, spec, 3, 5)
    w1, proj = weights["markov_w1.weight"], weights["conf_proj.weight"][0, target.n_embd :]
    gen = load_generator(target.path, DrafterSpec("dspark", path), n_ctx=256, n_threads=THREADS)
    stops = []
    try:
        drafter = gen.drafters["dspark"]
        for prompt in [*PROMPTS, "then we", "and the"]:
            context = gen.target.tokenize(prompt)
            gen.target.sync(context[:-1])
            drafter.prefill(context[:-1])
            proposal = drafter.propose(context, StopBelow(8, 0.5), SamplingConfig(temperature=0.0),
                                       np.random.default_rng(0))
            chain = [int(np.argmax(drafter.head.logits(i))) for i in range(8)]
            previous = np.array([context[-1], *chain[:-1]])
            # float32 in ggml against float64 here, over 16 products: a few ulps of values near 1
            confidence = 1.0 / (1.0 + np.exp(-(w1[previous] @ proj)))
            n = next((i for i, c in enumerate(confidence) if c < 0.5), 8)
            assert proposal.tokens == chain[:n], prompt
            assert np.allclose(proposal.confidences, confidence[:n], atol=1e-5), prompt
            stops.append(n)
        for prompt in PROMPTS[:2]:  # and K = auto, whose p_min reads the same confidences
            baseline = run(gen, prompt, 0)
            assert all(run(gen, prompt, k).tokens == baseline.tokens for k in (3, AUTO))
    finally:
        gen.close()
    assert any(0 < n < 8 for n in stops) and 8 in stops, stops  # drafts stopped inside the block, and one did not


# ----- q and exactness at T > 0 --------------------------------------------------------------------


def test_the_markov_shift_is_the_bias_difference_the_graph_would_have_added(targets, heads):
    markov = MarkovHead.read(heads["dspark", "llama"], n_vocab=targets["llama"].n_vocab)
    written = tiny_dflash.head_weights(targets["llama"], tiny_dflash.DFlashSpec(markov_rank=16), 3, 5)
    w1, w2 = written["markov_w1.weight"], written["markov_w2.weight"]
    assert np.array_equal(markov.w1(7), w1[7]) and np.array_equal(markov.w2, w2)  # read back as written
    assert not markov.shift(7, 7).any()  # at T = 0 the chain is the graph's own: no correction
    # float32 sums of 16 products taken in another order: equal to a few ulps of values ~5
    assert np.allclose(markov.shift(7, 9), w2 @ w1[9] - w2 @ w1[7], atol=1e-5)
    reduced = MarkovHead.from_arrays(w1, w2[:5], scale=2.0, d2t=np.array([3, 1, 4, 0, 2]), n_vocab=6)
    full = reduced.bias(7)
    assert full[5] == 0.0 and np.allclose(full[[3, 1, 4, 0, 2]], 2.0 * w2[:5] @ w1[7])


def test_a_drafted_token_off_the_argmax_gets_q_from_the_chain_it_took(targets, heads):
    """At T > 0, row i's q is the graph's row plus the Markov shift from the argmax the graph chained on
    to the token actually drafted: checked on the proposal's own reported q."""
    gen = load(targets, heads, "dspark", "llama", n_ctx=256)
    try:
        drafter = gen.drafters["dspark"]
        context = gen.target.tokenize("then we")
        gen.target.sync(context[:-1])
        drafter.prefill(context[:-1])
        cfg = SamplingConfig(temperature=3.0, top_k=0, top_p=1.0, min_p=0.0)
        rng = np.random.default_rng(7)
        for _ in range(40):
            proposal = drafter.propose(context, FixedBudget(2), cfg, rng)
            row0, row1 = (np.array(drafter.head.logits(i), dtype=np.float64) for i in (0, 1))
            if proposal.tokens[0] != int(np.argmax(row0)):
                break
        else:
            pytest.fail("no draft left the argmax at T = 3")
        shifted = row1 + drafter.markov.shift(int(np.argmax(row0)), proposal.tokens[0])
        expected = np.exp((shifted - shifted.max()) / 3.0)
        q = proposal.dists[1]
        assert q is not None
        assert np.allclose(q.dense(len(expected)), expected / expected.sum(), atol=1e-6)
    finally:
        gen.close()


@pytest.mark.parametrize("cfg", [lossless.PURE, lossless.PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
@pytest.mark.parametrize("kind", HEADS)
def test_rejection_sampling_with_the_head_reproduces_the_target(targets, heads, kind, cfg, monkeypatch):
    use_the_hybrid_target(monkeypatch)
    lossless.assert_reproduces_the_target(pair(targets, heads, kind, "qwen35"), cfg)


@pytest.mark.parametrize("kind", HEADS)
def test_the_same_check_catches_an_always_accept_rule(targets, heads, kind, monkeypatch):
    use_the_hybrid_target(monkeypatch)
    lossless.assert_an_always_accept_rule_is_caught(pair(targets, heads, kind, "qwen35"), monkeypatch)


# ----- fit checks, one line each -------------------------------------------------------------------


def test_variant_fit_checks_are_one_line_each():
    dflash = HeadFacts("dflash", 64, (0, 2, 3), 64, block_size=8, mask_token=4)
    dspark, dflash2 = replace(dflash, markov=True), replace(dflash, selector_top_k=4, has_selector=True)
    assert misfit(dspark, LLAMA) is None and misfit(dflash2, LLAMA) is None
    assert (dspark.max_draft, replace(dspark, sample_from_anchor=False).max_draft, dflash2.max_draft) == (8, 7, 7)
    assert misfit(replace(dspark, has_block_size=False), LLAMA, "h") == (
        "h is a DSpark head without dflash.block_size, which its Markov head needs; convert it again with "
        "llama.cpp's converter")
    assert misfit(replace(dflash2, has_selector=False), LLAMA, "h") == (
        "h has half a DFlash2 selector (dflash.selector_top_k 4, selector tensors absent); convert it again "
        "with llama.cpp's converter")
    assert misfit(replace(dflash2, selector_top_k=8), LLAMA, "h") == (
        "h is 64 wide, too narrow for its 8 x 9 selector lattice; convert it again with llama.cpp's converter")
    assert misfit(replace(dspark, block_size=0), LLAMA, "h") == (
        "h has block size 0; a DFlash block needs room for one draft token")
    assert misfit(replace(dspark, mask_token=None), LLAMA, "h").startswith("h has no mask token")


@pytest.mark.parametrize("kind", KINDS)
def test_the_tiny_heads_read_as_their_kind(heads, kind):
    facts = read_head(heads[kind, "llama"])
    assert (facts.drafter, facts.stages, facts.block_size) == (kind, 0, 8)
    assert facts.selector_top_k == (4 if kind == "dflash2" else 0) and facts.markov == (kind == "dspark")


# ----- the CLI and bench -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bench_json_names_the_head_drafter(targets, heads, kind, spectui_home, capsys):
    args = ["bench", "--target", str(targets["llama"].path), "--draft", str(heads[kind, "llama"]), "-k", "3",
            "--max-tokens", "16", "--prompt", "Once upon a time", "--threads", "1", "--json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (row["drafter"], row["drafter_label"], row["identical"]) == (
        kind, f"{LABELS[kind]} {kind}-llama.gguf", True)
    assert row["by_drafter"][kind]["proposed"] > 0


# ----- the catalog knows the kinds -----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_pair_with_a_variant_head_drafts_as_its_kind(targets, heads, kind):
    from spectui.catalog.checks import check_drafter
    from spectui.catalog.local.inspect import info_from_header
    from spectui.catalog.pull import drafter_of
    from spectui.errors import IncompatibleDraftError
    from spectui.session.options import pair_drafter_kind

    head = heads[kind, "llama"]
    assert drafter_of(head) == kind and pair_drafter_kind(kind, "auto") == kind
    assert info_from_header(read_header(head), head.name).drafter == kind
    check_drafter(targets["llama"].path, head, kind)
    footprint = memory.read_footprint(head)  # sized as the DFlash head it is: three tapped layers, f32
    assert footprint.extra_bytes == 3 * 64 * memory.TAP_ROWS * 4 and footprint.arch == "dflash"
    with pytest.raises(IncompatibleDraftError) as caught:
        check_drafter(targets["llama"].path, head, "dflash")
    assert str(caught.value) == (f"{kind}-llama.gguf is not a DFlash head (architecture 'dflash'); "
                                 "name the dflash GGUF or set the pair's drafter to match")


def test_a_bonus_anchor_dspark_head_drafts_from_the_mask_rows(targets, tmp_path):
    """`dflash.sample_from_anchor` false (SpecForge exports): row 0 passes through, rows 1..k draft
    (block_size - 1 at most, as DFlash), and greedy speculation still equals the target alone."""
    target = targets["llama"]
    path = tiny_dflash.write_dflash_head(tmp_path / "dspark-bonus.gguf", target,
                                         tiny_dflash.DFlashSpec(markov_rank=16, sample_from_anchor=False))
    assert read_head(path).sample_from_anchor is False
    gen = load_generator(target.path, DrafterSpec("dspark", path), n_ctx=1024, n_threads=THREADS)
    try:
        assert gen.drafters["dspark"].max_k == 7
        for prompt in PROMPTS[:2]:
            baseline = run(gen, prompt, 0)
            for k in (1, 7):
                assert run(gen, prompt, k).tokens == baseline.tokens
        acceptance, drafted = greedy_acceptance(gen, ks=(3,))
    finally:
        gen.close()
    assert drafted >= 50 and acceptance > 0.15
