"""`spectui pull` against a real local HTTP server speaking the Hub's file protocol.

The real huggingface_hub client does every request; nothing of it is mocked.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import pytest
import tiny_gguf
from hub_server import DRAFT_REPO, TARGET_REPO, FakeHub, pair_toml, write_catalog

from spectui.catalog import hub as hub_module
from spectui.catalog import list_pairs, pull_pair, record, resolve_pair
from spectui.catalog.pull import pull_adhoc
from spectui.catalog.resolve import remove_pair
from spectui.cli import main
from spectui.errors import CatalogError, IncompatibleDraftError, PullError


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pair_pulls_and_is_listed(tiny_on_hub: FakeHub, tiny_pair, capsys) -> None:
    pair = pull_pair("tiny")

    assert sha(pair.target) == sha(tiny_pair.target)
    assert sha(pair.draft) == sha(tiny_pair.draft)
    assert pair.recommended_k == 3
    assert resolve_pair("tiny") == pair
    assert resolve_pair(None) == pair  # a pulled pair is the default over the demo pair
    row = next(r for r in list_pairs() if r.name == "tiny")
    assert row.pulled and row.target == pair.target and row.draft == pair.draft
    assert row.size_gb == pytest.approx(
        (tiny_pair.target.stat().st_size + tiny_pair.draft.stat().st_size) / 1e9
    )
    assert {r.authorization for r in tiny_on_hub.state.requests} == {"Bearer hf_test_token"}

    assert main(["list", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)["pairs"]}
    assert listed["tiny"]["pulled"] is True
    assert listed["tiny"]["target"] == str(pair.target)
    assert listed["qwen2.5-7b"]["pulled"] is False


def test_second_pull_reuses_the_hub_cache(tiny_on_hub: FakeHub) -> None:
    first = pull_pair("tiny")
    record.remove_pair("tiny")
    gets_before = len(tiny_on_hub.gets("tiny-target-f32.gguf"))

    again = pull_pair("tiny")

    assert again == first
    assert len(tiny_on_hub.gets("tiny-target-f32.gguf")) == gets_before == 1


def test_split_files_are_all_downloaded_and_recorded(
    hub: FakeHub, spectui_home: Path, tiny_pair: tiny_gguf.TinyPair
) -> None:
    parts = ["tiny-q-00001-of-00002.gguf", "tiny-q-00002-of-00002.gguf"]
    hub.add(TARGET_REPO, parts[0], tiny_pair.target)
    hub.add(TARGET_REPO, parts[1], tiny_pair.draft)
    hub.add(DRAFT_REPO, "tiny-draft-f32.gguf", tiny_pair.draft)
    write_catalog(spectui_home, pair_toml(
        "split", (TARGET_REPO, parts), (DRAFT_REPO, ["tiny-draft-f32.gguf"])
    ))

    pair = pull_pair("split")

    assert pair.target.name == parts[0]
    second = pair.target.with_name(parts[1])  # llama.cpp looks for the parts beside the first
    assert sha(second) == sha(tiny_pair.draft)
    recorded = record.read_record().pairs["split"]
    assert [Path(f.path).name for f in recorded.target] == parts
    assert len(hub.gets(parts[1])) == 1


def test_cut_transfer_resumes_without_refetching_what_arrived(
    tiny_on_hub: FakeHub, tiny_pair: tiny_gguf.TinyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    # huggingface_hub writes in 10 MB chunks; a file this small needs smaller ones to be cut
    # "halfway" with something already on disk.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    size = tiny_pair.target.stat().st_size
    half = 6 * 64 * 1024
    assert half < size
    tiny_on_hub.cut_after(TARGET_REPO, "tiny-target-f32.gguf", half)

    with pytest.raises(PullError, match="run the pull again"):
        pull_pair("tiny")
    assert "tiny" not in record.read_record().pairs
    partials = list(hub_module.hub_cache_dir().rglob("*.incomplete"))
    assert [p.stat().st_size for p in partials] == [half]

    tiny_on_hub.heal()
    pair = pull_pair("tiny")

    assert sha(pair.target) == sha(tiny_pair.target)
    last = tiny_on_hub.gets("tiny-target-f32.gguf")[-1]
    assert last.range == f"bytes={half}-"
    assert tiny_on_hub.sent(TARGET_REPO, "tiny-target-f32.gguf") == size  # no byte sent twice
    assert not list(hub_module.hub_cache_dir().rglob("*.incomplete"))


def test_missing_file_names_repo_and_file(tiny_on_hub: FakeHub, spectui_home: Path) -> None:
    write_catalog(spectui_home, pair_toml(
        "typo", (TARGET_REPO, ["tiny-target-q9.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])
    ))
    with pytest.raises(PullError) as caught:
        pull_pair("typo")
    message = str(caught.value)
    assert "tiny-target-q9.gguf" in message and TARGET_REPO in message and "404" in message
    assert "\n" not in message
    assert not tiny_on_hub.gets("tiny-draft-f32.gguf")  # looked up everything before downloading


def test_missing_repo_is_named(tiny_on_hub: FakeHub, spectui_home: Path) -> None:
    write_catalog(spectui_home, pair_toml(
        "norepo", ("test-org/Nope-GGUF", ["x.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])
    ))
    with pytest.raises(PullError, match="test-org/Nope-GGUF"):
        pull_pair("norepo")


def test_gated_repo_says_how_to_get_access(tiny_on_hub: FakeHub, capsys) -> None:
    tiny_on_hub.gate(TARGET_REPO)

    assert main(["pull", "tiny"]) == 1

    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "gated" in err and TARGET_REPO in err
    assert "HF_TOKEN" in err and "hf auth login" in err and f"{tiny_on_hub.url}/{TARGET_REPO}" in err


def test_truncated_file_is_detected_and_not_marked_pulled(
    hub: FakeHub, spectui_home: Path, tiny_pair: tiny_gguf.TinyPair
) -> None:
    data = tiny_pair.target.read_bytes()
    hub.add(TARGET_REPO, "cut.gguf", data[: len(data) * 2 // 3])
    hub.add(DRAFT_REPO, "tiny-draft-f32.gguf", tiny_pair.draft)
    write_catalog(spectui_home, pair_toml(
        "cut", (TARGET_REPO, ["cut.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])
    ))

    with pytest.raises(PullError, match="truncated") as caught:
        pull_pair("cut")

    assert "not" in str(caught.value) and "marked pulled" in str(caught.value)
    assert "cut" not in record.read_record().pairs
    assert not list(hub_module.hub_cache_dir().rglob("cut.gguf"))  # not left to be reused
    with pytest.raises(CatalogError, match="not pulled"):
        resolve_pair("cut")


def test_file_that_is_not_a_gguf_is_refused(
    hub: FakeHub, spectui_home: Path, tiny_pair: tiny_gguf.TinyPair
) -> None:
    hub.add(TARGET_REPO, "page.gguf", b"<html>Sign in to continue</html>" * 100)
    hub.add(DRAFT_REPO, "tiny-draft-f32.gguf", tiny_pair.draft)
    write_catalog(spectui_home, pair_toml(
        "html", (TARGET_REPO, ["page.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])
    ))
    with pytest.raises(PullError, match="not a GGUF"):
        pull_pair("html")
    assert "html" not in record.read_record().pairs


def test_incompatible_pair_is_refused_naming_the_mismatch(
    hub: FakeHub, spectui_home: Path, tiny_pair: tiny_gguf.TinyPair, incompatible_draft: Path
) -> None:
    hub.add(TARGET_REPO, "tiny-target-f32.gguf", tiny_pair.target)
    hub.add(DRAFT_REPO, "bad-draft.gguf", incompatible_draft)
    write_catalog(spectui_home, pair_toml(
        "mixed", (TARGET_REPO, ["tiny-target-f32.gguf"]), (DRAFT_REPO, ["bad-draft.gguf"])
    ))
    with pytest.raises(IncompatibleDraftError, match="token 100") as caught:
        pull_pair("mixed")
    assert "not marked pulled" in str(caught.value)
    assert "mixed" not in record.read_record().pairs


def test_two_concurrent_pulls_of_one_pair_both_succeed(
    tiny_on_hub: FakeHub, tiny_pair: tiny_gguf.TinyPair
) -> None:
    tiny_on_hub.state.delay_s = 0.3  # both threads are inside the download at the same time
    results: list[object] = []

    def pull() -> None:
        try:
            results.append(pull_pair("tiny"))
        except Exception as error:  # collected and asserted below
            results.append(error)

    threads = [threading.Thread(target=pull) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert len(results) == 2 and all(not isinstance(r, Exception) for r in results), results
    assert results[0] == results[1]
    assert sha(results[0].target) == sha(tiny_pair.target)
    assert sha(results[0].draft) == sha(tiny_pair.draft)
    assert len(tiny_on_hub.gets("tiny-target-f32.gguf")) == 1  # the second waited, then reused
    assert list(record.read_record().pairs) == ["tiny"]


def test_free_disk_space_is_checked_before_the_first_byte(
    tiny_on_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(hub_module.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.raises(PullError, match="not enough disk space"):
        pull_pair("tiny")
    assert not [r for r in tiny_on_hub.state.requests if r.method == "GET"]


def test_adhoc_pair_from_repo_and_file(tiny_on_hub: FakeHub, tiny_pair, capsys) -> None:
    code = main([
        "pull", "--target", f"{TARGET_REPO}:tiny-target-f32.gguf",
        "--draft", f"{DRAFT_REPO}:tiny-draft-f32.gguf", "--name", "mine",
    ])
    assert code == 0, capsys.readouterr().err
    pair = resolve_pair("mine")
    assert sha(pair.target) == sha(tiny_pair.target)
    row = next(r for r in list_pairs() if r.name == "mine")
    assert row.pulled and row.source == "ad-hoc"


def test_adhoc_pair_from_local_paths_keeps_user_files(
    spectui_home: Path, tiny_pair: tiny_gguf.TinyPair
) -> None:
    pair = pull_adhoc("local", str(tiny_pair.target), str(tiny_pair.draft))
    assert pair.target == tiny_pair.target.resolve()
    assert remove_pair("local") == []
    assert tiny_pair.target.exists() and tiny_pair.draft.exists()


def test_rm_keeps_files_another_pair_uses(
    tiny_on_hub: FakeHub, spectui_home: Path, tiny_pair: tiny_gguf.TinyPair
) -> None:
    tiny_on_hub.add(TARGET_REPO, "other-target.gguf", tiny_pair.target.read_bytes() + b"")
    write_catalog(
        spectui_home,
        pair_toml("tiny", (TARGET_REPO, ["tiny-target-f32.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])),
        pair_toml("twin", (TARGET_REPO, ["other-target.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])),
    )
    tiny = pull_pair("tiny")
    twin = pull_pair("twin")
    assert tiny.draft == twin.draft

    deleted = remove_pair("tiny")

    assert tiny.draft not in deleted and tiny.draft.exists()  # twin still uses the draft
    assert twin.target.exists()  # same content, same blob: still referenced by twin
    assert "tiny" not in record.read_record().pairs
    assert resolve_pair("twin") == twin
    deleted = remove_pair("twin")
    assert twin.draft in deleted and not twin.draft.exists()
    with pytest.raises(CatalogError, match="not pulled"):
        remove_pair("twin")


def test_progress_goes_through_the_given_tqdm_class(
    tiny_on_hub: FakeHub, tiny_pair: tiny_gguf.TinyPair
) -> None:
    from tqdm.auto import tqdm

    bars: list[tqdm] = []

    class Recording(tqdm):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            bars.append(self)

    pull_pair("tiny", tqdm_class=Recording)

    assert [b.desc for b in bars] == ["tiny-target-f32.gguf", "tiny-draft-f32.gguf"]
    assert [b.total for b in bars] == [tiny_pair.target.stat().st_size, tiny_pair.draft.stat().st_size]
    assert all(b.n == b.total for b in bars)


def test_adhoc_spec_that_is_neither_path_nor_repo_file(spectui_home: Path, capsys) -> None:
    code = main(["pull", "--target", "no-such-file.gguf", "--draft", "x", "--name", "bad"])
    err = capsys.readouterr().err
    assert code == 1 and "neither an existing file nor REPO:FILE" in err and err[-1] == "\n"
    assert main(["pull", "--target", "a/b:c.gguf"]) == 1
    assert "--target, --draft and --name together" in capsys.readouterr().err


def test_adhoc_pair_looks_up_both_models_before_downloading(tiny_on_hub: FakeHub) -> None:
    with pytest.raises(PullError, match=f"nope.gguf not found in {DRAFT_REPO}"):
        pull_adhoc("mine", f"{TARGET_REPO}:tiny-target-f32.gguf", f"{DRAFT_REPO}:nope.gguf")
    assert not tiny_on_hub.gets("tiny-target-f32.gguf")
