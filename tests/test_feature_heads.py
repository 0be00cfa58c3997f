"""The EAGLE-3 and DFlash drafters on real llama.cpp: tiny generated targets (an attention `llama`
and a hybrid `qwen35`, tests/tiny_bigram.py) with heads built to guess right often
(tests/tiny_eagle3.py, tests/tiny_dflash.py): greedy equivalence, losslessness at T > 0, the
features going in and in line, the head's state after rollbacks, and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import lossless
import numpy as np
import pytest
import tiny_bigram
import tiny_dflash
import tiny_eagle3
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
from numerics import GreedyReference, assert_same_evaluation, assert_same_proposal

from spectui.cli import main
from spectui.engine.drafters import DrafterSpec
from spectui.engine.drafters.taps import FeatureTaps
from spectui.engine.generation_config import AUTO
from spectui.engine.generator import Generator, load_generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import FixedBudget
from spectui.errors import IncompatibleDraftError

KINDS = ("eagle3", "dflash")
TARGETS = ("llama", "qwen35")
WRITERS = {"eagle3": tiny_eagle3.write_eagle3_head, "dflash": tiny_dflash.write_dflash_head}
LABELS = {"eagle3": "EAGLE-3 head", "dflash": "DFlash head"}


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tiny_bigram.BigramTarget]:
    return tiny_targets(tmp_path_factory.mktemp("heads"))


@pytest.fixture(scope="module")
def heads(targets) -> dict[tuple[str, str], Path]:
    return write_heads(targets, WRITERS)


# ----- what loads ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_head_named_by_draft_drafts_by_default(targets, heads, kind):
    gen = load(targets, heads, kind, "llama")
    try:
        assert gen.default_kind == kind and gen.notes == []
        assert gen.kinds == [kind, "ngram", "suffix", f"{kind}+ngram", f"{kind}+suffix"]
        assert gen.label() == f"{LABELS[kind]} {kind}-llama.gguf"
        assert "model" not in gen.drafters and "mtp" not in gen.drafters
        assert gen.drafters[kind].max_k == (7 if kind == "dflash" else 16)  # DFlash: block_size 8 - 1
    finally:
        gen.close()


# ----- greedy equivalence ------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_speculation_equals_the_target_alone(targets, heads, kind, target):
    gen = load(targets, heads, kind, target)
    try:
        for prompt in PROMPTS:
            baseline = GreedyReference(gen.target, gen.target.tokenize(prompt),
                                       lambda prompt=prompt: run(gen, prompt, 0),
                                       label=f"{kind} on {target}, {prompt!r}")
            assert len(baseline.tokens) == 48
            for k in [1, 2, 3, AUTO]:  # the same reply, or a GPU's near-tie
                baseline.check(lambda prompt=prompt, k=k: run(gen, prompt, k), label=f"K={k}")
        if target == "qwen35":
            assert gen.target.rewind_counts.get("snapshot", 0) > 0  # the hybrid rolled back
        if kind == "eagle3":
            assert gen.drafters[kind].rows.missing == 0
    finally:
        gen.close()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_acceptance_of_the_tiny_head_is_informative(targets, heads, kind, target):
    """Random heads are almost always wrong; these are built to be right often, not always."""
    gen = load(targets, heads, kind, target)
    try:
        acceptance, drafted = greedy_acceptance(gen)
    finally:
        gen.close()
    assert drafted >= 200
    assert 0.2 < acceptance < 0.9, f"{kind} on {target}: per-token greedy acceptance {acceptance:.2f}"


@pytest.mark.parametrize("kind", KINDS)
def test_the_head_reads_the_target_features_in_line(targets, heads, kind, monkeypatch):
    """With zeroed features, or every feature row one position late, the head guesses clearly
    worse: the taps really feed it, at the right positions."""
    def acceptance() -> float:
        gen = load(targets, heads, kind, "llama")
        try:
            return greedy_acceptance(gen, ks=(2,))[0]
        finally:
            gen.close()

    right = acceptance()
    real_rows = FeatureTaps.rows
    monkeypatch.setattr(FeatureTaps, "rows", lambda self, n: real_rows(self, n) * 0.0)
    zeros = acceptance()
    previous: list[np.ndarray] = []

    def one_late(self: FeatureTaps, n: int) -> np.ndarray:
        rows = real_rows(self, n)
        late = np.vstack([previous[-1] if previous else rows[:1], rows[:-1]])
        previous.append(rows[-1:])
        return late

    monkeypatch.setattr(FeatureTaps, "rows", one_late)
    shifted = acceptance()
    assert right > zeros + 0.05 and right > shifted + 0.15, (right, zeros, shifted)


@pytest.mark.parametrize("kind", KINDS)
def test_auto_learns_the_head_cost_per_pass(targets, heads, kind):
    gen = load(targets, heads, kind, "llama")
    try:
        run(gen, PROMPTS[0], AUTO, max_tokens=64)
        figures = gen.auto(True).of(kind)
        assert figures.measured and figures.cost.n > 0
    finally:
        gen.close()


# ----- the head's state after rollbacks ----------------------------------------------------------


def first_proposal(gen: Generator, kind: str, context: list[int]):
    """The drafter's next proposal at T = 1 from a fixed seed: its tokens and its q's."""
    return gen.drafters[kind].propose(context, FixedBudget(3), lossless.PURE, np.random.default_rng(7))


@pytest.mark.parametrize("kind", KINDS)
def test_head_after_rollbacks_and_a_deep_rewind_equals_a_fresh_one(targets, heads, kind):
    gen = load(targets, heads, kind, "qwen35")
    try:
        prompt = gen.target.tokenize(PROMPTS[0])
        run(gen, prompt, 3, max_tokens=40, temperature=1.0, seed=1)  # a reply, then a different one:
        final = run(gen, prompt, 3, max_tokens=40, temperature=1.0, seed=2)  # back to the prompt's end
        counts = gen.target.rewind_counts
        assert counts.get("snapshot", 0) > 0 and counts.get("checkpoint", 0) > 0
        context = [*prompt, *final.tokens]
        assert gen.target.cached == context[:-1]
        after = first_proposal(gen, kind, context)
    finally:
        gen.close()
    fresh = load(targets, heads, kind, "qwen35")
    try:
        fresh.target.sync(context[:-1])
        fresh.drafters[kind].prefill(context[:-1])
        expected = first_proposal(fresh, kind, context)
    finally:
        fresh.close()
    assert len(after.tokens) == 3
    # Same tokens and q's; on a GPU a draw may part at a boundary rounding moved (an H200 drew
    # 119 for 201 at position 1), the q's up to there still the same (numerics).
    assert_same_proposal(after, expected, 512)


@pytest.mark.parametrize("kind", KINDS)
def test_target_logits_after_head_speculation_equal_a_fresh_evaluation(targets, heads, kind):
    gen = load(targets, heads, kind, "qwen35")
    try:
        final = run(gen, PROMPTS[2], 3, max_tokens=40)
        context = [*gen.target.tokenize(PROMPTS[2]), *final.tokens]
        logits = gen.target.extend(context[-1:])[-1].copy()
    finally:
        gen.close()
    with LlamaModel.load(targets["qwen35"].path, n_ctx=256, n_threads=THREADS) as fresh:
        assert_same_evaluation(logits, fresh.sync(context))


# ----- losslessness at T > 0 ---------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [lossless.PURE, lossless.PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
@pytest.mark.parametrize("kind", KINDS)
def test_rejection_sampling_with_a_head_reproduces_the_target(targets, heads, kind, cfg, monkeypatch):
    use_the_hybrid_target(monkeypatch)
    lossless.assert_reproduces_the_target(pair(targets, heads, kind, "qwen35"), cfg)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_check_with_a_head_catches_an_always_accept_rule(targets, heads, kind, monkeypatch):
    use_the_hybrid_target(monkeypatch)
    lossless.assert_an_always_accept_rule_is_caught(pair(targets, heads, kind, "qwen35"), monkeypatch)


# ----- refusals, in one line -----------------------------------------------------------------------


def refusal(target: Path, head: Path, kind: str) -> str:
    with pytest.raises(IncompatibleDraftError) as caught:
        load_generator(target, DrafterSpec(kind, head), n_ctx=256, n_threads=THREADS).close()
    line = str(caught.value)
    assert "\n" not in line
    return line


def test_a_head_of_the_wrong_shape_gets_one_clear_line(targets, tmp_path):
    target = targets["llama"]
    narrow = tiny_eagle3.write_eagle3_head(tmp_path / "eagle3-narrow.gguf", target,
                                           tiny_eagle3.Eagle3Spec(target_hidden_size=48))
    assert refusal(target.path, narrow, "eagle3") == (
        "eagle3-narrow.gguf reads hidden states 48 wide (eagle3.target_hidden_size), but bigram-llama.gguf "
        "writes them 64 wide; pick the EAGLE-3 head published for bigram-llama.gguf's model")
    deep = tiny_eagle3.write_eagle3_head(tmp_path / "eagle3-deep.gguf", target,
                                         tiny_eagle3.Eagle3Spec(target_layers=(2, 16, 29)))
    assert refusal(target.path, deep, "eagle3") == (
        "eagle3-deep.gguf reads target layer 16, but bigram-llama.gguf has layers 0..3 to read (4 layers); "
        "pick the EAGLE-3 head published for bigram-llama.gguf's model")
    unmasked = tiny_dflash.write_dflash_head(tmp_path / "dflash-unmasked.gguf", target,
                                             tiny_dflash.DFlashSpec(mask_token=None))
    assert refusal(target.path, unmasked, "dflash") == (
        "dflash-unmasked.gguf has no mask token (tokenizer.ggml.mask_token_id), which DFlash drafts with; "
        "convert it again with llama.cpp's converter")


def test_a_head_for_another_tokenizer_is_refused_like_a_draft_model(targets, tmp_path):
    target = targets["llama"]
    swapped = tiny_eagle3.write_eagle3_head(tmp_path / "eagle3-swapped.gguf", target, swap_token=100)
    assert refusal(target.path, swapped, "eagle3") == (
        "draft eagle3-swapped.gguf does not share the tokenizer of target bigram-llama.gguf (token 100: "
        "'_' vs '`'); pick a draft from the same model family and generation")


def test_a_head_is_not_a_draft_model_nor_the_other_kind_of_head(targets, heads):
    target = targets["llama"].path
    gen = load_generator(target, DrafterSpec("model", heads["eagle3", "llama"]), n_ctx=256, n_threads=THREADS)
    try:
        assert gen.notes[0] == ("a draft model is off: eagle3-llama.gguf is an EAGLE-3 head, not a draft "
                                "model: it drafts as --drafter eagle3")
    finally:
        gen.close()
    gen = load_generator(target, DrafterSpec("dflash", heads["eagle3", "llama"]), n_ctx=256, n_threads=THREADS)
    try:
        assert gen.notes[0] == ("a DFlash head is off: eagle3-llama.gguf is an EAGLE-3 head: "
                                "it drafts as --drafter eagle3")
        assert gen.default_kind == "eagle3"  # what runs drafts instead: the head, as what it is
    finally:
        gen.close()


def test_without_the_taps_in_llama_cpp_a_head_is_one_line_and_a_lookup_drafts(targets, heads, monkeypatch):
    from spectui.engine.drafters import taps

    monkeypatch.setattr(taps, "_bound", {})
    monkeypatch.setitem(taps._SYMBOLS, "llama_get_embeddings_layer_inp",
                        (("no_such_symbol",), *taps._SYMBOLS["llama_get_embeddings_layer_inp"][1:]))
    gen = load(targets, heads, "eagle3", "llama", n_ctx=256)
    try:
        line = gen.notes[0]
        assert line.startswith("an EAGLE-3 head is off: the installed llama-cpp-python (") and "\n" not in line
        assert line.endswith("lacks llama.cpp's hidden-state taps (llama_get_embeddings_layer_inp); "
                             "install llama-cpp-python 0.3.36 or newer")
        assert gen.default_kind == "suffix" and "eagle3" not in gen.drafters
    finally:
        gen.close()


# ----- the CLI and bench -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bench_json_names_the_head_drafter(targets, heads, kind, spectui_home, capsys):
    args = ["bench", "--target", str(targets["llama"].path), "--draft", str(heads[kind, "llama"]), "-k", "2",
            "--max-tokens", "16", "--prompt", "Once upon a time", "--threads", "1", "--json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (row["drafter"], row["drafter_label"], row["identical"]) == (
        kind, f"{LABELS[kind]} {kind}-llama.gguf", True)
    assert row["by_drafter"][kind]["proposed"] > 0 and 0 < row["acceptance_rate"] < 1


def test_the_cli_refuses_a_misfit_head_in_one_line(targets, tmp_path, spectui_home, capsys):
    narrow = tiny_eagle3.write_eagle3_head(tmp_path / "eagle3-narrow.gguf", targets["llama"],
                                           tiny_eagle3.Eagle3Spec(target_hidden_size=48))
    args = ["bench", "--target", str(targets["llama"].path), "--draft", str(narrow), "-k", "2",
            "--max-tokens", "8", "--prompt", "Hello", "--threads", "1"]
    assert main(args) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("spectui: eagle3-narrow.gguf reads hidden states 48 wide") and "Traceback" not in err
