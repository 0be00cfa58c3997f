"""The MTP drafter on real llama.cpp, with a tiny generated `qwen35` target that carries one MTP
layer built to guess well (tests/tiny_mtp.py): greedy equivalence, losslessness at T > 0, the
head's state after rollbacks, and the one-line refusals."""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import llama_cpp
import lossless
import pytest
import tiny_mtp
from head_runs import PROMPTS, greedy_acceptance, run
from mtp_runs import THREADS, MtpPair, first_proposal
from numerics import GreedyReference, assert_same_distribution, assert_same_evaluation
from tiny_gguf import write_header_model

from spectui.catalog import record
from spectui.cli import main
from spectui.engine.drafters import AUTO_KIND, DrafterSpec
from spectui.engine.drafters import mtp as mtp_module
from spectui.engine.drafters.mtp_context import HiddenRows
from spectui.engine.generation_config import AUTO
from spectui.engine.generator import Generator, load_generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.session.options import models_from_args, pair_drafter_kind

MTP = DrafterSpec("mtp")


@pytest.fixture(scope="module")
def mtp_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_mtp.write_mtp_target(tmp_path_factory.mktemp("mtp"))


@pytest.fixture(scope="module")
def plain_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_mtp.write_target_without_heads(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def generator(mtp_target) -> Generator:
    gen = load_generator(mtp_target, DrafterSpec(), n_ctx=1024, n_threads=THREADS)
    yield gen
    gen.close()


# ----- what loads ------------------------------------------------------------------------------


def test_a_target_with_heads_drafts_with_them_by_default(generator):
    target, drafter = generator.target, generator.drafters["mtp"]
    assert target.mtp_loaded and llama_cpp.llama_model_n_layer_nextn(target.model_handle) == 1
    assert (target.arch, target.n_layer, target.rollback) == ("qwen35", 4, "snapshots")
    assert generator.default_kind == "mtp" and generator.notes == []
    assert generator.kinds == ["mtp", "ngram", "suffix", "mtp+ngram", "mtp+suffix"]
    assert generator.label() == "MTP heads" and drafter.max_k == 16
    assert not drafter.head.shares_target_cache  # qwen35 heads keep their own one-layer cache


# ----- greedy equivalence ------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculation_equals_the_target_alone(generator, prompt):
    baseline = GreedyReference(generator.target, generator.target.tokenize(prompt),
                               lambda: run(generator, prompt, 0), label=repr(prompt))
    assert len(baseline.tokens) == 48
    for k in [1, 2, 3, AUTO]:
        baseline.check(lambda k=k: run(generator, prompt, k), label=f"K={k}")  # same, or a GPU's near-tie
    assert generator.drafters["mtp"].rows.missing == 0


def test_greedy_acceptance_of_the_tiny_head_is_informative(generator):
    """Random heads are almost always wrong; this one is built to be right often, not always."""
    acceptance, drafted = greedy_acceptance(generator)
    assert drafted >= 200
    assert 0.2 < acceptance < 0.95, f"per-token greedy acceptance {acceptance:.2f}"


def test_the_head_reads_the_row_of_the_token_before(generator, monkeypatch):
    """The head at position p needs the target's hidden row of p - 1: with zeros, or with the
    row of p instead, it guesses clearly worse (so the rows really go in, and in line)."""
    right, _ = greedy_acceptance(generator, ks=(2,))
    real_get = HiddenRows.get
    monkeypatch.setattr(HiddenRows, "get", lambda self, pos: real_get(self, pos) * 0.0)
    zeros, _ = greedy_acceptance(generator, ks=(2,))
    monkeypatch.setattr(HiddenRows, "get", lambda self, pos: real_get(self, pos + 1) if self.has(pos + 1)
                        else real_get(self, pos))
    shifted, _ = greedy_acceptance(generator, ks=(2,))
    assert right > zeros + 0.15 and right > shifted + 0.1, (right, zeros, shifted)


def test_auto_learns_the_head_cost_per_pass(generator):
    run(generator, PROMPTS[0], AUTO, max_tokens=64)
    figures = generator.auto(True).of("mtp")
    assert figures.measured and figures.cost.n > 0


# ----- the head's state after rollbacks ----------------------------------------------------------


def test_head_after_rollbacks_and_a_deep_rewind_equals_a_fresh_one(mtp_target):
    gen = load_generator(mtp_target, MTP, n_ctx=1024, n_threads=THREADS)
    try:
        prompt = gen.target.tokenize(PROMPTS[0])
        run(gen, prompt, 3, max_tokens=40, temperature=1.0, seed=1)  # a reply, then a different one:
        final = run(gen, prompt, 3, max_tokens=40, temperature=1.0, seed=2)  # back to the prompt's end
        assert gen.target.rewind_counts.get("snapshot", 0) > 0 and gen.target.rewind_counts.get("checkpoint", 0) > 0
        context = [*prompt, *final.tokens]
        assert gen.target.cached == context[:-1]
        after = first_proposal(gen, context)
        assert gen.drafters["mtp"].rows.missing == 0
    finally:
        gen.close()
    fresh = load_generator(mtp_target, MTP, n_ctx=1024, n_threads=THREADS)
    try:
        fresh.target.sync(context[:-1])
        fresh.drafters["mtp"].prefill(context[:-1])
        expected = first_proposal(fresh, context)
    finally:
        fresh.close()
    assert after.tokens == expected.tokens and len(after.tokens) == 3
    for got, want in zip(after.dists, expected.dists, strict=True):
        assert_same_distribution(got.dense(512), want.dense(512))


def test_target_logits_after_mtp_speculation_equal_a_fresh_evaluation(generator, mtp_target):
    final = run(generator, PROMPTS[2], 3, max_tokens=40)
    context = [*generator.target.tokenize(PROMPTS[2]), *final.tokens]
    logits = generator.target.extend(context[-1:])[-1].copy()
    with LlamaModel.load(mtp_target, n_ctx=256, n_threads=THREADS) as fresh:
        assert_same_evaluation(logits, fresh.sync(context))


# ----- losslessness at T > 0 ---------------------------------------------------------------------


def use_the_mtp_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lossless check (tests/lossless.py) on one thread, from a context where the tiny MTP target is
    unsure (top p 0.13 at T = 1; 10 tokens left at T = 0.8 with top-k, top-p and min-p, top 0.51)."""
    monkeypatch.setattr(lossless, "PROMPT", "we went")
    monkeypatch.setattr(lossless, "load_generator", functools.partial(load_generator, n_threads=THREADS))


@pytest.mark.parametrize("cfg", [lossless.PURE, lossless.PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
def test_rejection_sampling_with_mtp_reproduces_the_target(mtp_target, cfg, monkeypatch):
    use_the_mtp_target(monkeypatch)
    lossless.assert_reproduces_the_target(MtpPair(mtp_target, MTP), cfg)


def test_the_same_check_with_mtp_catches_an_always_accept_rule(mtp_target, monkeypatch):
    use_the_mtp_target(monkeypatch)
    lossless.assert_an_always_accept_rule_is_caught(MtpPair(mtp_target, MTP), monkeypatch)


# ----- refusals, in one line -----------------------------------------------------------------------


def test_a_target_without_heads_asked_for_mtp_says_so_in_one_line(plain_target):
    gen = load_generator(plain_target, MTP, n_ctx=256, n_threads=THREADS)
    try:
        assert not gen.target.mtp_loaded and "mtp" not in gen.drafters
        assert gen.default_kind == "suffix"  # the free lookup drafts instead
        assert gen.notes[0] == (
            "MTP heads is off: plain-target.gguf carries no MTP heads (qwen35.nextn_predict_layers is 0 "
            "or missing); use a GGUF published with its MTP layers (an -MTP-GGUF repo) or pass --draft"
        )
    finally:
        gen.close()
    auto = load_generator(plain_target, DrafterSpec(), n_ctx=256, n_threads=THREADS)
    try:  # not asked for: no MTP, and no note about it
        assert "mtp" not in auto.drafters and auto.notes == []
    finally:
        auto.close()


def test_without_llama_cpp_support_mtp_is_one_line_and_a_draft_model_still_runs(mtp_target, plain_target,
                                                                                 monkeypatch):
    monkeypatch.delattr(llama_cpp, "llama_process")
    gen = load_generator(mtp_target, MTP, n_ctx=256, n_threads=THREADS)
    try:
        assert not gen.target.mtp_loaded
        line = gen.notes[0]
        assert line.startswith("MTP heads is off: the installed llama-cpp-python (") and "\n" not in line
        assert "lacks llama.cpp's MTP calls (llama_process); install llama-cpp-python 0.3.36 or newer" in line
    finally:
        gen.close()
    # The plain target is a qwen35 with the same vocabulary: it serves as a draft model here.
    fallback = load_generator(mtp_target, DrafterSpec(draft=plain_target), n_ctx=256, n_threads=THREADS)
    try:
        assert fallback.default_kind == "model+suffix" and "mtp" not in fallback.drafters
    finally:
        fallback.close()


def test_a_named_draft_model_wins_over_the_heads_under_auto(mtp_target, plain_target):
    gen = load_generator(mtp_target, DrafterSpec(draft=plain_target), n_ctx=256, n_threads=THREADS)
    try:
        assert not gen.target.mtp_loaded and gen.default_kind == "model+suffix" and gen.notes == []
    finally:
        gen.close()


def test_an_assistant_sidecar_is_not_a_draft_model_and_needs_its_own_target(mtp_target, tmp_path):
    sidecar = write_header_model(tmp_path / "mtp-gemma-4-tiny.gguf", "gemma4-assistant", {
        "gemma4-assistant.nextn_predict_layers": 1, "gemma4-assistant.embedding_length_out": 64})
    gen = load_generator(mtp_target, DrafterSpec("mtp", sidecar), n_ctx=256, n_threads=THREADS)
    try:
        assert gen.notes == ["MTP heads is off: mtp-gemma-4-tiny.gguf drafts for gemma4 targets, not qwen35"]
    finally:
        gen.close()
    gen = load_generator(mtp_target, DrafterSpec("model", sidecar), n_ctx=256, n_threads=THREADS)
    try:
        assert gen.notes[0] == (
            "a draft model is off: mtp-gemma-4-tiny.gguf is an MTP assistant (gemma4-assistant), "
            "not a draft model: it drafts as --drafter mtp"
        )
    finally:
        gen.close()


def test_target_options_ask_for_the_heads_only_when_they_may_run(mtp_target, plain_target):
    assert mtp_module.target_options(MTP, mtp_target) == {"load_mtp": True}
    assert mtp_module.target_options(DrafterSpec(), mtp_target) == {"load_mtp": True}
    assert mtp_module.target_options(DrafterSpec("model", plain_target), mtp_target) == {}
    assert mtp_module.target_options(DrafterSpec(draft=plain_target), mtp_target) == {}
    assert mtp_module.target_options(MTP, plain_target) == {}


# ----- the catalog, the options, bench ------------------------------------------------------------


@pytest.fixture
def mtp_pair_record(spectui_home, mtp_target) -> str:
    """A pulled catalog pair `heads` whose target drafts with its own MTP layer."""
    target = record.PulledFile(path=str(mtp_target), size=mtp_target.stat().st_size)
    pulled = record.PulledPair(target=[target], drafter="mtp", target_arch="qwen35", recommended_k=2,
                               description="tiny heads", pulled_at=record.now())
    record.add_pair("heads", pulled)
    return "heads"


def test_a_catalog_mtp_pair_becomes_an_mtp_spec(mtp_pair_record, mtp_target):
    args = argparse.Namespace(pair=mtp_pair_record, target=None, draft=None, drafter=None, draft_n_gpu_layers=None)
    choice = models_from_args(args)
    assert (choice.target, choice.drafter, choice.recommended_k) == (mtp_target, DrafterSpec("mtp"), 2)
    args.drafter = "none"
    assert models_from_args(args).drafter == DrafterSpec("none")
    assert pair_drafter_kind("model", AUTO_KIND) == AUTO_KIND


def test_a_local_target_with_heads_needs_no_draft_and_says_so(spectui_home, mtp_target, capsys):
    args = argparse.Namespace(pair=None, target=str(mtp_target), draft=None, drafter=None, draft_n_gpu_layers=None)
    choice = models_from_args(args)
    assert choice.drafter == DrafterSpec() and choice.notice.endswith(
        "drafts with its own MTP heads (1 layer(s)); no separate draft needed")
    assert "drafts with its own MTP heads" in capsys.readouterr().err


def test_bench_json_names_the_mtp_drafter(mtp_pair_record, capsys):
    args = ["bench", "--pair", mtp_pair_record, "-k", "2", "--max-tokens", "16", "--prompt", "Hello there",
            "--threads", "1", "--json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (row["drafter"], row["drafter_label"], row["identical"]) == ("mtp", "MTP heads", True)
    assert row["by_drafter"]["mtp"]["proposed"] > 0 and 0 < row["acceptance_rate"] < 1
