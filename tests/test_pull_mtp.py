"""`spectui pull` of MTP pairs (heads in the target, or a Gemma 4 style assistant sidecar), the
record of a pair without a draft model, and repos that also hold `mmproj-*.gguf` projectors.

The same local Hub server as test_pull.py; the MTP checks read only GGUF headers (and, for a
sidecar, the vocabularies through llama.cpp), so the models here are headers with a tokenizer
and no tensors: valid GGUFs for those checks, not loadable networks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_gguf
from hub_server import DRAFT_REPO, TARGET_REPO, FakeHub, write_catalog

from spectui import paths
from spectui.catalog import hub as hub_module
from spectui.catalog import list_pairs, pull_pair, record, resolve_pair
from spectui.catalog.pull import pull_adhoc
from spectui.cli import main
from spectui.errors import CatalogError, IncompatibleDraftError, PullError

MTP_REPO = "test-org/Tiny-MTP-GGUF"
GEMMA_REPO = "test-org/tiny-gemma-4-it-GGUF"
PROJECTOR = "mmproj-F16.gguf"


def assistant(path: Path, made_for_width: int, swap_token: int = 0) -> Path:
    arch = "gemma4-assistant"
    return tiny_gguf.write_header_model(path, arch, {
        f"{arch}.block_count": 4, f"{arch}.nextn_predict_layers": 4,
        f"{arch}.embedding_length": 32, f"{arch}.embedding_length_out": made_for_width,
    }, swap_token)


@pytest.fixture(scope="module")
def headers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mtp-headers")
    return {
        "heads": tiny_gguf.write_header_model(d / "heads.gguf", "qwen35", {
            "qwen35.block_count": 5, "qwen35.nextn_predict_layers": 1, "qwen35.embedding_length": 64,
        }),
        "no_heads": tiny_gguf.write_header_model(d / "plain.gguf", "qwen35", {
            "qwen35.block_count": 4, "qwen35.embedding_length": 64,
        }),
        "gemma": tiny_gguf.write_header_model(d / "gemma.gguf", "gemma4", {
            "gemma4.block_count": 6, "gemma4.embedding_length": 64,
        }),
        "assistant": assistant(d / "mtp-assistant.gguf", made_for_width=64),
        "narrow": assistant(d / "mtp-narrow.gguf", made_for_width=48),
        "other_vocab": assistant(d / "mtp-other-vocab.gguf", made_for_width=64, swap_token=100),
    }


def mtp_toml(name: str, target: tuple[str, str], draft: tuple[str, str] | None = None) -> str:
    text = (
        f'[pairs."{name}"]\ndescription = "mtp pair {name}"\nsize_gb = 0.001\nrecommended_k = 2\n'
        f'drafter = "mtp"\ntarget_arch = "qwen35"\n'
        f'[pairs."{name}".target]\nrepo = "{target[0]}"\nfiles = ["{target[1]}"]\n'
    )
    if draft is not None:
        text += f'[pairs."{name}".draft]\nrepo = "{draft[0]}"\nfiles = ["{draft[1]}"]\n'
    return text


def error_line(stderr: str) -> str:
    """The error: the last stderr line, after the one-line progress notes and nothing else."""
    *notes, error = stderr.splitlines()
    assert "Traceback" not in stderr and all("checking" in note for note in notes)
    return error


def projector_requests(server: FakeHub) -> list[str]:
    return [r.path for r in server.state.requests if PROJECTOR in r.path]


# ----- MTP heads in the target ------------------------------------------------------------------


def test_mtp_heads_pair_pulls_without_a_draft(
    hub: FakeHub, spectui_home: Path, headers: dict[str, Path], capsys
) -> None:
    hub.add(MTP_REPO, "Tiny-MTP-Q8_0.gguf", headers["heads"])
    hub.add(MTP_REPO, PROJECTOR, headers["gemma"])  # the vision projector a real repo ships too
    write_catalog(spectui_home, mtp_toml("tinymtp", (MTP_REPO, "Tiny-MTP-Q8_0.gguf")))

    assert main(["pull", "tinymtp"]) == 0
    out = capsys.readouterr().out
    assert "the target's own MTP heads" in out

    pair = resolve_pair("tinymtp")
    assert (pair.drafter, pair.draft) == ("mtp", None)
    assert pair.target.read_bytes() == headers["heads"].read_bytes()
    recorded = record.read_record().pairs["tinymtp"]
    assert recorded.draft == [] and recorded.drafter == "mtp" and recorded.target_arch == "qwen35"
    assert projector_requests(hub) == []

    assert main(["list", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["pairs"] if r["name"] == "tinymtp")
    assert row["pulled"] and row["draft"] is None
    assert (row["drafter"], row["target_arch"], row["hybrid"]) == ("mtp", "qwen35", True)
    assert main(["list"]) == 0
    assert "    mtp:    the target's own MTP heads" in capsys.readouterr().out.splitlines()


def test_mtp_entry_whose_target_has_no_heads_is_refused(
    hub: FakeHub, spectui_home: Path, headers: dict[str, Path], capsys
) -> None:
    hub.add(MTP_REPO, "Tiny-Q8_0.gguf", headers["no_heads"])
    write_catalog(spectui_home, mtp_toml("nohead", (MTP_REPO, "Tiny-Q8_0.gguf")))

    assert main(["pull", "nohead"]) == 1

    err = error_line(capsys.readouterr().err)
    assert "pair nohead was not marked pulled" in err and "Tiny-Q8_0.gguf carries no MTP heads" in err
    assert "qwen35.nextn_predict_layers is missing" in err
    assert "nohead" not in record.read_record().pairs
    with pytest.raises(CatalogError, match="not pulled"):
        resolve_pair("nohead")


# ----- Gemma 4 style assistant sidecar ----------------------------------------------------------


def test_mtp_sidecar_pair_pulls(
    hub: FakeHub, spectui_home: Path, headers: dict[str, Path]
) -> None:
    hub.add(GEMMA_REPO, "tiny-gemma-4-it-Q4_0.gguf", headers["gemma"])
    hub.add(GEMMA_REPO, "mtp-tiny-gemma-4-it.gguf", headers["assistant"])
    hub.add(GEMMA_REPO, PROJECTOR, headers["gemma"])
    write_catalog(spectui_home, mtp_toml(
        "tinygemma", (GEMMA_REPO, "tiny-gemma-4-it-Q4_0.gguf"), (GEMMA_REPO, "mtp-tiny-gemma-4-it.gguf")
    ))

    pair = pull_pair("tinygemma")

    assert pair.drafter == "mtp" and pair.draft is not None
    assert pair.draft.name == "mtp-tiny-gemma-4-it.gguf"
    assert pair.draft.read_bytes() == headers["assistant"].read_bytes()
    assert resolve_pair("tinygemma") == pair
    row = next(r for r in list_pairs() if r.name == "tinygemma")
    assert (row.drafter, row.target_arch, row.hybrid, row.draft) == ("mtp", "gemma4", False, pair.draft)
    assert projector_requests(hub) == []


@pytest.mark.parametrize(
    ("target", "sidecar", "expected"),
    [
        ("gemma", "tiny-draft", "is not an MTP assistant drafter (architecture 'llama'"),
        ("gemma", "narrow", "was made for a target 48 wide, but tiny-gemma.gguf is 64 wide"),
        ("no_heads", "assistant", "drafts for gemma4 targets, but tiny-gemma.gguf is 'qwen35'"),
        ("gemma", "other_vocab", "does not share the tokenizer"),
    ],
    ids=["not-an-assistant", "other-size", "other-arch", "other-tokenizer"],
)
def test_mtp_sidecar_that_does_not_fit_the_target_is_refused(
    hub: FakeHub, spectui_home: Path, headers: dict[str, Path],
    tiny_pair: tiny_gguf.TinyPair, target: str, sidecar: str, expected: str,
) -> None:
    files = {**headers, "tiny-draft": tiny_pair.draft}
    hub.add(GEMMA_REPO, "tiny-gemma.gguf", files[target])
    hub.add(GEMMA_REPO, "mtp-tiny.gguf", files[sidecar])
    write_catalog(spectui_home, mtp_toml(
        "misfit", (GEMMA_REPO, "tiny-gemma.gguf"), (GEMMA_REPO, "mtp-tiny.gguf")
    ))

    with pytest.raises(IncompatibleDraftError) as caught:
        pull_pair("misfit")

    message = str(caught.value)
    assert expected in message and "not marked pulled" in message and "\n" not in message
    assert "misfit" not in record.read_record().pairs


# ----- the record ------------------------------------------------------------------------------


def test_record_round_trips_a_pair_without_a_draft(spectui_home: Path, tmp_path: Path) -> None:
    target = record.PulledFile(path=str(tmp_path / "t.gguf"), size=10, repo=MTP_REPO,
                               filename="t.gguf", commit="c" * 40, owned=True)
    pulled = record.PulledPair(target=[target], drafter="mtp", target_arch="qwen35",
                               recommended_k=2, description="heads", pulled_at=record.now())
    record.add_pair("heads", pulled)

    assert record.read_record().pairs["heads"] == pulled
    stored = json.loads(paths.pulled_record_path().read_text())["pairs"]["heads"]
    assert (stored["draft"], stored["drafter"], stored["target_arch"]) == ([], "mtp", "qwen35")
    Path(target.path).write_bytes(b"GGUF")
    resolved = resolve_pair("heads")
    assert (resolved.target, resolved.draft, resolved.drafter) == (Path(target.path), None, "mtp")


def test_record_of_a_model_pair_without_its_draft_is_damaged(spectui_home: Path) -> None:
    path = paths.pulled_record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    old_style = {"path": "/x/t.gguf", "size": 1}
    path.write_text(json.dumps({"version": 1, "pairs": {
        "legacy": {"target": [old_style], "draft": [{"path": "/x/d.gguf", "size": 1}]},
        "broken": {"target": [old_style], "draft": []},
    }}))
    with pytest.raises(CatalogError, match=r"is damaged .*delete it and pull the pairs again"):
        record.read_record()
    data = json.loads(path.read_text())
    del data["pairs"]["broken"]
    path.write_text(json.dumps(data))
    legacy = record.read_record().pairs["legacy"]  # a record written before drafters existed
    assert legacy.drafter == "model" and legacy.target_arch is None


# ----- vision projectors -----------------------------------------------------------------------


def test_repo_with_a_projector_beside_the_model_pulls_only_the_model(
    tiny_on_hub: FakeHub, tiny_pair: tiny_gguf.TinyPair
) -> None:
    tiny_on_hub.add(TARGET_REPO, PROJECTOR, tiny_pair.draft)
    tiny_on_hub.add(DRAFT_REPO, "mmproj-tiny-draft-BF16.gguf", tiny_pair.draft)

    pair = pull_pair("tiny")

    assert pair.drafter == "model" and pair.draft is not None
    assert not [r.path for r in tiny_on_hub.state.requests if "mmproj" in r.path]
    assert not list(hub_module.hub_cache_dir().rglob("mmproj*"))
    row = next(r for r in list_pairs() if r.name == "tiny")
    assert (row.target_arch, row.hybrid) == ("llama", False)  # read from the pulled header


def test_projector_named_as_a_model_is_refused(tiny_on_hub: FakeHub) -> None:
    tiny_on_hub.add(TARGET_REPO, PROJECTOR, b"GGUF")
    with pytest.raises(PullError, match="vision projector"):
        pull_adhoc("vis", f"{TARGET_REPO}:{PROJECTOR}", f"{DRAFT_REPO}:tiny-draft-f32.gguf")
    assert not tiny_on_hub.state.requests
