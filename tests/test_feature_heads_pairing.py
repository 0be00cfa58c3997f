"""EAGLE-3 and DFlash heads outside the engine: what fits which target (header facts alone), the
local models listing and automatic pairing, catalog pairs and their checks, and the memory plan."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import gguf
import pytest
import tiny_bigram
import tiny_dflash
import tiny_eagle3
from local_stores import only_folder

from spectui.catalog import checks, record
from spectui.catalog.local import auto_draft_for, discover, pair_all
from spectui.catalog.local.index import LocalIndex
from spectui.cli import main
from spectui.engine.drafters import DrafterSpec
from spectui.engine.files.heads import HeadFacts, TargetFacts, misfit, read_head, read_target
from spectui.errors import IncompatibleDraftError
from spectui.session import memory
from spectui.session.options import models_from_args

EAGLE = HeadFacts("eagle3", 64, (0, 2, 3), 64)
DFLASH = HeadFacts("dflash", 64, (1, 3), 64, block_size=16, mask_token=4)
LLAMA = TargetFacts("llama", 64, 4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A target, its two heads, and a head of the wrong width, in one folder."""
    directory = tmp_path_factory.mktemp("local-heads")
    target = tiny_bigram.llama_target(directory)
    tiny_eagle3.write_eagle3_head(directory / "eagle3-llama.gguf", target)
    tiny_dflash.write_dflash_head(directory / "dflash-llama.gguf", target)
    tiny_eagle3.write_eagle3_head(directory / "eagle3-narrow.gguf", target,
                                  tiny_eagle3.Eagle3Spec(target_hidden_size=48))
    return directory


@pytest.fixture
def local(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Path:
    """spectui looks at `folder` only (empty Ollama, LM Studio and HF stores)."""
    return only_folder(folder, tmp_path, monkeypatch, spectui_home)


# ----- what fits, from the headers ---------------------------------------------------------------


def test_misfit_names_each_reason_in_one_line():
    assert misfit(EAGLE, LLAMA) is None and misfit(DFLASH, LLAMA) is None
    assert misfit(EAGLE, TargetFacts("gemma3", 64, 4), "h", "t").startswith(
        "llama.cpp cannot hand the hidden states of a gemma3 target to a head (its graph has no layer taps)")
    assert misfit(replace(EAGLE, target_layers=(1, 2)), LLAMA, "h") == (
        "h lists 2 target layers; an EAGLE-3 head reads exactly 3")
    assert misfit(replace(DFLASH, n_embd=48, target_hidden_size=48), LLAMA, "h", "t") == (
        "h reads hidden states 48 wide (its width), but t writes them 64 wide; "
        "pick the DFlash head published for t's model")
    final = replace(DFLASH, target_layers=(1, 4))  # the output of the last layer
    assert misfit(final, TargetFacts("nemotron_h", 64, 4)) is None
    assert "reads target layer 4, but t has layers 0..3 to read" in misfit(final, LLAMA, "h", "t")
    assert "reads target layer 4" in misfit(replace(EAGLE, target_layers=(0, 2, 4)), TargetFacts("mimo2", 64, 4),
                                            "h", "t")  # EAGLE-3 never reads the last layer's output
    assert misfit(replace(DFLASH, block_size=1), LLAMA, "h") == (
        "h has block size 1; a DFlash block needs room for one draft token")


def test_header_facts_of_the_tiny_files(folder):
    assert read_head(folder / "eagle3-llama.gguf") == EAGLE
    assert read_head(folder / "dflash-llama.gguf") == HeadFacts("dflash", 64, (0, 2, 3), 64, block_size=8,
                                                                mask_token=4)
    assert read_target(folder / "bigram-llama.gguf") == LLAMA


def _dspark_header(path: Path, tensors: tuple[str, ...] = ("markov_w1.weight",), **keys: int) -> Path:
    writer = gguf.GGUFWriter(str(path), "dflash")
    writer.add_embedding_length(64)
    writer.add_array("dflash.target_layers", [1, 2])
    for key, value in keys.items():
        writer.add_uint32(key.replace("__", "."), value)
    for name in tensors:
        writer.add_tensor(name, tiny_bigram.np.zeros((4, 8), dtype=tiny_bigram.np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_dspark_head_is_told_by_its_markov_tensor(tmp_path):
    facts = read_head(_dspark_header(tmp_path / "dspark.gguf"))
    assert (facts.drafter, facts.kind_name, facts.stages, facts.max_draft) == ("dspark", "DSpark", 0, 16)
    assert facts.confidence_head is False
    assert read_head(_dspark_header(tmp_path / "conf.gguf", ("markov_w1.weight", "conf_proj.weight"))).confidence_head
    assert not read_head(_dspark_header(tmp_path / "plain.gguf", ("conf_proj.weight",))).confidence_head


def test_deepseek_v4_stages_llama_cpp_would_abort_on_are_one_line_each(tmp_path):
    """`dflash.hyper_connection.count` (src/llama-arch.cpp:307) marks DeepSeek-V4 stages; the shapes
    llama.cpp asserts on (it aborts the process) are refused from the header."""
    stage = {"dflash__hyper_connection__count": 4, "dflash__attention__sliding_window": 64,
             "dflash__attention__head_count": 2, "dflash__attention__output_group_count": 1,
             "dflash__attention__key_length": 32, "dflash__attention__value_length": 32,
             "dflash__block_size": 8, "tokenizer__ggml__mask_token_id": 4}
    fits = read_head(_dspark_header(tmp_path / "dsv4.gguf", **stage))
    assert (fits.drafter, fits.stages, fits.stages_misfit) == ("dspark", 4, None) and misfit(fits, LLAMA) is None
    reasons = {
        "dflash__hyper_connection__count": (2, "has 2 hyper-connection streams (dflash.hyper_connection.count), "
                                               "where its stages take 4"),
        "dflash__attention__sliding_window": (0, "has no sliding window (dflash.attention.sliding_window), which its "
                                                 "stages keep their cache in"),
        "dflash__attention__output_group_count": (3, "splits 2 attention heads into 3 output groups "
                                                     "(dflash.attention.output_group_count)"),
        "dflash__attention__value_length": (16, "has keys and values of different widths, where its attention "
                                                "shares one row for both"),
    }
    for key, (value, why) in reasons.items():
        facts = read_head(_dspark_header(tmp_path / f"{key}.gguf", **(stage | {key: value})))
        assert misfit(facts, LLAMA, "h") == (f"h is a DeepSeek-V4 DSpark head that {why}, on which llama.cpp would "
                                             "abort; convert it again with llama.cpp's converter")
    assert read_head(_dspark_header(tmp_path / "zero.gguf", dflash__hyper_connection__count=0)).stages_misfit is None


# ----- models on disk ------------------------------------------------------------------------------


def test_local_pairing_puts_fitting_heads_first_and_refuses_the_misfit(local):
    index = LocalIndex()
    found = discover(index=index)
    kinds = {m.path.name: m.info.kind for m in found.models}
    assert kinds == {"bigram-llama.gguf": "model", "eagle3-llama.gguf": "head", "dflash-llama.gguf": "head",
                     "eagle3-narrow.gguf": "head"}
    pairings = pair_all(found, index)
    assert [p.target.path.name for p in pairings] == ["bigram-llama.gguf"]  # a head is never a target
    target = pairings[0]
    assert {d.model.path.name: d.relation for d in target.drafts} == {
        "eagle3-llama.gguf": "EAGLE-3 head", "dflash-llama.gguf": "DFlash head"}
    refused = {r.model.path.name: r.reason for r in target.refused}
    assert refused == {"eagle3-narrow.gguf": (
        "it reads hidden states 48 wide (eagle3.target_hidden_size), but the target "
        "writes them 64 wide; pick the EAGLE-3 head published for the target's model")}
    assert target.best_for("dflash").model.path.name == "dflash-llama.gguf"
    assert target.best_for("model") is None


def test_list_local_shows_the_heads_as_drafts(local, capsys):
    assert main(["list", "--local"]) == 0
    out = capsys.readouterr().out
    assert f"  draft: {local / 'dflash-llama.gguf'} (DFlash head, 45% of the target's size)" in out  # neither measured
    assert f"         {local / 'eagle3-llama.gguf'} (EAGLE-3 head, 42% of the target's size)" in out
    assert f"  refused: {local / 'eagle3-narrow.gguf'}: it reads hidden states 48 wide" in out


def test_auto_pairing_picks_a_head_for_the_kind_asked(local, capsys):
    target = local / "bigram-llama.gguf"
    head, message = auto_draft_for(target)
    assert head == local / "dflash-llama.gguf"  # neither measured yet: llama-server's order (test_head_order)
    assert message == (f"draft for {target}: {head} (DFlash head, 45% of the target's size), picked automatically "
                       "from 2 compatible on disk, not yet measured on this machine: this load measures it (0 of 2 "
                       "measured; the fastest is kept); --draft REF picks another")
    assert auto_draft_for(target, kind="dflash")[0] == local / "dflash-llama.gguf"
    assert auto_draft_for(target, kind="eagle3")[0] == local / "eagle3-llama.gguf"
    assert auto_draft_for(target, kind="model")[0] is None
    args = argparse.Namespace(pair=None, target=str(target), draft=None, drafter="dflash", draft_n_gpu_layers=None)
    assert models_from_args(args).drafter == DrafterSpec("dflash", local / "dflash-llama.gguf")
    assert f"draft for {target}: {local / 'dflash-llama.gguf'} (DFlash head" in capsys.readouterr().err


def test_a_head_named_as_the_target_is_one_line(local, capsys):
    assert main(["bench", "--target", str(local / "eagle3-llama.gguf"), "--max-tokens", "4"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["spectui: eagle3-llama.gguf is an EAGLE-3 head, not a model to chat with: pass it as --draft "
                   "beside the target it was trained for (--target MODEL --draft eagle3-llama.gguf)"]


def test_pair_add_records_a_head_as_what_it_drafts_as(local, capsys):
    assert main(["pair", "add", "mine", "--target", str(local / "bigram-llama.gguf"),
                 "--draft", str(local / "dflash-llama.gguf")]) == 0
    assert record.read_record().pairs["mine"].drafter == "dflash"
    assert main(["pair", "add", "bad", "--target", str(local / "bigram-llama.gguf"),
                 "--draft", str(local / "eagle3-narrow.gguf")]) != 0
    assert "pair bad was not saved: eagle3-narrow.gguf reads hidden states 48 wide" in capsys.readouterr().err


# ----- catalog pairs ------------------------------------------------------------------------------


def test_a_catalog_head_pair_is_checked_and_runs_as_its_kind(folder, spectui_home):
    target, head = folder / "bigram-llama.gguf", folder / "eagle3-llama.gguf"
    checks.check_drafter(target, head, "eagle3")
    with pytest.raises(IncompatibleDraftError, match=r"^dflash-llama.gguf is not an EAGLE-3 head \(architecture "
                       r"'dflash'\); name the eagle3 GGUF or set the pair's drafter to match$"):
        checks.check_drafter(target, folder / "dflash-llama.gguf", "eagle3")
    with pytest.raises(IncompatibleDraftError, match="reads hidden states 48 wide"):
        checks.check_drafter(target, folder / "eagle3-narrow.gguf", "eagle3")
    files = [record.PulledFile(path=str(p), size=p.stat().st_size) for p in (target, head)]
    record.add_pair("heads", record.PulledPair(target=files[:1], draft=files[1:], drafter="eagle3",
                                               description="tiny head", pulled_at=record.now()))
    args = argparse.Namespace(pair="heads", target=None, draft=None, drafter=None, draft_n_gpu_layers=None)
    assert models_from_args(args).drafter == DrafterSpec("eagle3", head)


def test_a_catalog_entry_needs_the_head_file():
    from pydantic import ValidationError

    from spectui.catalog.schema import PairEntry

    with pytest.raises(ValidationError, match="field 'draft' is required"):
        PairEntry(description="x", size_gb=1, drafter="dflash", target={"repo": "a/b", "files": ["t.gguf"]})


# ----- the memory plan ------------------------------------------------------------------------------


def test_the_memory_plan_counts_the_taps_and_never_calls_a_head_too_large(folder):
    head = memory.read_footprint(folder / "eagle3-llama.gguf")
    assert head.extra_bytes == 3 * 64 * memory.TAP_ROWS * 4  # three tapped layers, f32, n_batch rows
    assert head.kv_bytes_per_token == 1 * 1 * (64 + 64) * memory.KV_BYTES_PER_VALUE  # one layer, one head
    target = memory.read_footprint(folder / "bigram-llama.gguf")
    assert head.weights_bytes > target.weights_bytes * checks.DRAFT_SIZE_LIMIT  # a draft model this big warns
    plan = memory.plan(target, head, 4096, gpu=False, n_gpu_layers=None, draft_n_gpu_layers=None,
                       ram=10**12, vram=None)
    assert plan.warnings == []
    tight = memory.plan(target, head, 4096, gpu=False, n_gpu_layers=None, draft_n_gpu_layers=None,
                        ram=head.total(4096) + target.total(4096), vram=None)
    assert tight.warnings and "KV cache" in tight.warnings[0]  # the taps count in the RAM needed
