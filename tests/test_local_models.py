"""Models already on disk: discovery in fake Ollama / LM Studio / HF-cache stores, references,
automatic pairing with reasons, the cache, read-only behaviour, and runs through `ollama:` refs.

The stores are laid out by `local_stores.store_layout` with tiny real GGUFs; environment
variables (`OLLAMA_MODELS`, `HOME`, `HF_HUB_CACHE`, `SPECTUI_HOME`) point spectui at them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_output import one_error_line
from local_stores import COMMIT, Files, Layout, ollama_model, point_at, snapshot, store_layout, write_files
from ui_harness import SIZE, RecordingApp, palette_text, ready, run_async, send, shown, until
from ui_harness import options as ui_options

from spectui.catalog.local import auto_draft_for, discover, pair_all, resolve_reference
from spectui.catalog.local.index import LocalIndex
from spectui.cli import main
from spectui.errors import LocalModelError, SettingsError


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return write_files(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def layout(files: Files, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return store_layout(tmp_path_factory.mktemp("stores"), files)


@pytest.fixture
def stores(layout: Layout, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Layout:
    point_at(layout, monkeypatch, spectui_home)
    return layout


def test_discovery_finds_every_store_and_says_what_it_skipped(stores: Layout) -> None:
    found = discover()
    by_ref = {m.reference: m for m in found.models}
    mtp_path = str(stores.extra / "sub" / "tiny-mtp.gguf")
    assert set(by_ref) == {
        "ollama:tiny:7b", "ollama:someone/tinier:q8", "lmstudio:pub/tiny-GGUF/tiny-2l.gguf",
        "lmstudio:pub/mixed-GGUF/draft-incompatible.gguf", "lmstudio:pub/mixed-GGUF/bos.gguf",
        "hf:owner/tiny-GGUF:tiny-draft-q.gguf", mtp_path,
    }  # tiny:latest is the same blob as tiny:7b: listed once
    target = by_ref["ollama:tiny:7b"]
    assert target.path == stores.blob(stores.files.target) and target.source == "ollama"
    assert (target.info.arch, target.info.quantization, target.info.context_length) == ("llama", "F32", 4096)
    assert target.size == stores.files.target.stat().st_size
    assert target.parameters > by_ref["ollama:someone/tinier:q8"].parameters > 0
    assert target.info.mtp_layers == 0 and by_ref[mtp_path].info.mtp_layers == 1
    skipped = {p.where: p.reason for p in found.skipped}
    assert "mmproj" in skipped["lmstudio:pub/tiny-GGUF/mmproj-tiny-f16.gguf"]
    assert "not valid JSON" in skipped["ollama:broken:latest"]
    assert "missing from" in skipped["ollama:ghost:latest"]
    assert "only partly downloaded" in skipped["hf:owner/tiny-GGUF:partial.gguf"]


def test_references_resolve_to_the_files_in_each_store(stores: Layout) -> None:
    blob = stores.blob(stores.files.target)
    assert resolve_reference("ollama:tiny") == blob
    assert resolve_reference("ollama:tiny:7b") == blob
    assert resolve_reference("ollama:registry.ollama.ai/library/tiny:latest") == blob
    assert resolve_reference("ollama:someone/tinier:q8") == stores.blob(stores.files.draft)
    lms = stores.home / ".lmstudio" / "models" / "pub"
    assert resolve_reference("lmstudio:pub/tiny-GGUF") == lms / "tiny-GGUF" / "tiny-2l.gguf"  # mmproj ignored
    assert resolve_reference("lmstudio:pub/mixed-GGUF/bos.gguf") == lms / "mixed-GGUF" / "bos.gguf"
    hf = resolve_reference("hf:owner/tiny-GGUF:tiny-draft-q.gguf")
    assert hf.parent.name == COMMIT and hf.read_bytes() == stores.files.draft.read_bytes()
    assert resolve_reference("~/x.gguf") == stores.home / "x.gguf"


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("ollama:nope:1b", "ollama: no model nope:1b in {ollama} (manifests/registry.ollama.ai/library/nope/1b); "
                           "`ollama list` shows what is there"),
        ("ollama:tiny:13b", "(tags of tiny here: 7b, latest)"),
        ("ollama:broken", "the manifest of broken:latest ({ollama}/manifests/registry.ollama.ai/library/broken/"
                          "latest) is not valid JSON"),
        ("ollama:ghost", "ghost:latest names blob sha256-0000"),
        ("ollama:a/b/c/d:e", "is not an Ollama model name"),
        ("lmstudio:pub/mixed-GGUF", "holds 2 models (bos.gguf, draft-incompatible.gguf); name one"),
        ("lmstudio:pub/none", "lmstudio: no model folder pub/none in {home}/.lmstudio/models or "),
        ("lmstudio:pub/tiny-GGUF/nope.gguf", "lmstudio: no file pub/tiny-GGUF/nope.gguf in {home}"),
        ("lmstudio:pub/vision-GGUF", "lmstudio: {home}/.lmstudio/models/pub/vision-GGUF holds no language model"),
        ("hf:owner/tiny-GGUF:absent.gguf", "hf: owner/tiny-GGUF:absent.gguf is not in the Hugging Face cache "
                                           "{hub} (looked for models--owner--tiny-GGUF/snapshots/*/absent.gguf)"),
        ("hf:owner/tiny-GGUF:partial.gguf", "only partly downloaded"),
        ("hf:not-a-repo", "write hf:OWNER/REPO:FILE.gguf"),
    ],
)
def test_bad_references_are_one_line_errors_naming_what_and_where(stores: Layout, reference: str,
                                                                   expected: str) -> None:
    with pytest.raises(LocalModelError) as caught:
        resolve_reference(reference)
    message = str(caught.value)
    assert "\n" not in message
    assert expected.format(ollama=stores.ollama, home=stores.home, hub=stores.hub) in message


def test_a_missing_ollama_store_says_to_set_ollama_models(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nowhere"))
    with pytest.raises(LocalModelError, match=r"no model store at .*nowhere; set OLLAMA_MODELS"):
        resolve_reference("ollama:qwen2.5:7b")


def test_pairing_ranks_compatible_drafts_and_gives_each_refusal_its_reason(stores: Layout) -> None:
    index = LocalIndex()
    pairings = {p.target.reference: p for p in pair_all(discover(index=index), index)}
    target = pairings["ollama:tiny:7b"]
    assert [d.model.reference for d in target.drafts] == [
        "ollama:someone/tinier:q8", "hf:owner/tiny-GGUF:tiny-draft-q.gguf"]  # equal files: discovery order
    assert all(d.relation == "same architecture" and 0 < d.ratio < 0.5 for d in target.drafts)
    refused = {r.model.reference: r.reason for r in target.refused}
    assert refused["lmstudio:pub/mixed-GGUF/draft-incompatible.gguf"] == "tokenizer differs: token 100: '_' vs '`'"
    assert refused["lmstudio:pub/mixed-GGUF/bos.gguf"] == "tokenizer differs: add-BOS flag False vs True"
    assert refused["lmstudio:pub/tiny-GGUF/tiny-2l.gguf"].startswith("too large to pay off (59%")
    assert refused[str(stores.extra / "sub" / "tiny-mtp.gguf")].startswith("not smaller than the target")
    smallest = pairings["ollama:someone/tinier:q8"]
    assert not smallest.drafts and all(r.larger for r in smallest.refused if "tiny" in r.model.reference)
    mtp = pairings[str(stores.extra / "sub" / "tiny-mtp.gguf")]
    assert mtp.mtp_layers == 1 and mtp.best is not None


def test_list_local_shows_drafts_refusals_mtp_and_skipped(stores: Layout, capsys) -> None:
    assert main(["list", "--local"]) == 0
    out = capsys.readouterr().out
    assert "ollama:tiny:7b" in out and "F32" in out
    assert "  draft: ollama:someone/tinier:q8 (same architecture, 39% of the target's size)" in out
    assert "  refused: lmstudio:pub/mixed-GGUF/draft-incompatible.gguf: tokenizer differs: token 100" in out
    assert "  MTP heads: 1 layer(s) in the file, no separate draft needed" in out
    assert "lmstudio:pub/tiny-GGUF/mmproj-tiny-f16.gguf: a vision/audio projector (mmproj)" in out
    assert main(["list", "--local", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = next(p for p in data["pairings"] if p["target"] == "ollama:tiny:7b")
    assert first["drafts"][0]["path"] == str(stores.blob(stores.files.draft))
    assert {m["reference"]: m["has_mtp"] for m in data["models"]}[str(stores.extra / "sub" / "tiny-mtp.gguf")]
    assert len(data["skipped"]) == 5


def test_a_second_listing_reads_no_gguf_and_loads_no_vocabulary(stores: Layout, monkeypatch, capsys) -> None:
    from spectui.engine.files import gguf_file
    from spectui.engine.model.llama_model import LlamaModel

    reads: list[Path] = []
    loads: list[Path] = []
    real_read, real_load = gguf_file.read_header, LlamaModel.load.__func__

    def counted_read(path: Path):
        reads.append(path)
        return real_read(path)

    def counted_load(cls, path, **kwargs):
        loads.append(Path(path))
        return real_load(cls, path, **kwargs)

    monkeypatch.setattr(gguf_file, "read_header", counted_read)
    monkeypatch.setattr(LlamaModel, "load", classmethod(counted_load))
    assert main(["list", "--local", "--json"]) == 0
    first = capsys.readouterr().out
    assert len(reads) >= 8 and len(loads) == 7  # one vocab-only load per model, never two
    reads.clear(), loads.clear()
    assert main(["list", "--local", "--json"]) == 0
    assert capsys.readouterr().out == first
    assert reads == [] and loads == []


def test_a_changed_file_is_read_again(stores: Layout, tmp_path, monkeypatch, spectui_home) -> None:
    from spectui.engine.files import gguf_file

    folder = tmp_path / "mine"
    model = folder / "m.gguf"
    model.parent.mkdir()
    shutil.copyfile(stores.files.draft, model)
    (spectui_home / "config" / "config.toml").write_text(f"local_model_dirs = [{json.dumps(str(folder))}]\n")
    discover()
    reads: list[Path] = []
    real_read = gguf_file.read_header
    monkeypatch.setattr(gguf_file, "read_header", lambda p: reads.append(p) or real_read(p))
    discover()
    assert reads == []
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 10**9))
    assert any(m.path == model for m in discover().models)
    assert reads == [model.resolve()]


def test_auto_draft_names_the_catalog_draft_when_none_is_local(files: Files, tmp_path, monkeypatch,
                                                              spectui_home) -> None:
    from spectui.catalog.local import pairing

    root = tmp_path / "sparse"
    ollama_model(root / "ollama", ("registry.ollama.ai", "library", "tiny", "latest"), files.target)
    bad = root / "home" / ".lmstudio" / "models" / "pub" / "bad-GGUF" / "bad.gguf"
    bad.parent.mkdir(parents=True)
    shutil.copyfile(files.bad, bad)
    monkeypatch.setenv("OLLAMA_MODELS", str(root / "ollama"))
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hub"))
    monkeypatch.setattr(pairing, "SUGGEST_FROM_PARAMETERS", 0)  # tiny models count as large here
    (spectui_home / "config").mkdir(parents=True)
    (spectui_home / "config" / "models.toml").write_text(
        '[pairs."tiny-7b"]\ndescription = "tiny"\nsize_gb = 1\n'
        'target = { repo = "someone/tiny-7B-GGUF", files = ["tiny-7b-q4.gguf"] }\n'
        'draft = { repo = "someone/tiny-0.5B-GGUF", files = ["tiny-0.5b-q8.gguf"] }\n'
    )
    draft, message = auto_draft_for(resolve_reference("ollama:tiny"))
    assert draft is None
    assert "no compatible draft on disk for ollama:tiny:latest (1 smaller model(s) refused: " \
           "lmstudio:pub/bad-GGUF/bad.gguf: tokenizer differs: token 100" in message
    assert ("`spectui pull --target ollama:tiny:latest --draft someone/tiny-0.5B-GGUF:tiny-0.5b-q8.gguf "
            "--name tiny-7b-local` downloads only the draft") in message
    # The draft model needs a draft: one line saying so (without --drafter, bench runs the suffix lookup).
    assert main(["bench", "--target", "ollama:tiny", "--drafter", "model"]) == 1


def test_chat_options_pick_the_best_local_draft_and_say_so(stores: Layout, capsys) -> None:
    from spectui.cli import build_parser
    from spectui.session.options import options_from_args

    options = options_from_args(build_parser().parse_args(["chat", "--target", "ollama:tiny"]))
    assert options.target == stores.blob(stores.files.target)
    assert options.drafter.draft == stores.blob(stores.files.draft)
    assert "draft for ollama:tiny:7b: ollama:someone/tinier:q8" in (options.notice or "")
    assert options.notice in capsys.readouterr().err
    explicit = options_from_args(build_parser().parse_args(
        ["chat", "--target", "ollama:tiny", "--draft", "hf:owner/tiny-GGUF:tiny-draft-q.gguf"]))
    draft = explicit.drafter.draft
    assert draft is not None and draft.parent.name == COMMIT and explicit.notice is None


def test_bench_end_to_end_through_an_ollama_reference(stores: Layout, capsys) -> None:
    args = ["bench", "--target", "ollama:tiny", "--max-tokens", "16", "--prompt", "in the", "-k", "3", "--json"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    row = json.loads(out)
    assert row["target"] == str(stores.blob(stores.files.target))
    assert row["draft"] == str(stores.blob(stores.files.draft))
    assert row["identical"] is True and 0 < row["acceptance_rate"] <= 1
    assert "picked automatically" in err


def test_bench_with_a_bad_reference_is_one_line(stores: Layout, capsys) -> None:
    assert main(["bench", "--target", "ollama:nope", "--draft", "ollama:tiny"]) == 1
    assert "ollama: no model nope:latest in" in one_error_line(capsys.readouterr().err)


def test_pair_add_then_chat_and_rm_never_delete_another_tools_files(stores: Layout, capsys) -> None:
    from spectui.catalog import resolve_pair

    hf = "hf:owner/tiny-GGUF:tiny-draft-q.gguf"
    assert main(["pair", "add", "mine", "--target", "ollama:tiny", "--draft", hf]) == 0
    assert "run: spectui chat mine" in capsys.readouterr().out
    pair = resolve_pair("mine")
    assert pair.target == stores.blob(stores.files.target) and pair.draft.parent.name == COMMIT
    assert main(["list", "--json"]) == 0
    assert any(row["name"] == "mine" and row["pulled"] for row in json.loads(capsys.readouterr().out)["pairs"])
    assert main(["rm", "mine"]) == 0
    assert pair.target.is_file() and pair.draft.is_file()
    assert main(["pair", "add", "worse", "--target", "ollama:tiny",
                 "--draft", "lmstudio:pub/mixed-GGUF/draft-incompatible.gguf"]) == 1
    assert "pair worse was not saved" in one_error_line(capsys.readouterr().err)


def test_pull_accepts_references_for_local_files(stores: Layout, capsys) -> None:
    assert main(["pull", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8", "--name", "p"]) == 0
    capsys.readouterr()
    assert main(["rm", "p"]) == 0
    assert "nothing deleted" in capsys.readouterr().out
    assert stores.blob(stores.files.draft).is_file()


def test_other_tools_stores_are_never_written(stores: Layout, capsys) -> None:
    before = snapshot(stores.root)
    assert main(["list", "--local", "--json"]) == 0
    for reference in ["ollama:tiny", "lmstudio:pub/tiny-GGUF", "hf:owner/tiny-GGUF:tiny-draft-q.gguf"]:
        resolve_reference(reference)
    assert main(["bench", "--target", "ollama:tiny", "--max-tokens", "8", "--prompt", "the", "-k", "2"]) == 0
    assert main(["pair", "add", "ro", "--target", "ollama:tiny", "--draft", "ollama:someone/tinier:q8"]) == 0
    assert main(["rm", "ro"]) == 0
    capsys.readouterr()
    assert snapshot(stores.root) == before  # no file changed, created, removed or locked there


def test_local_pairings_feed_the_in_app_picker(stores: Layout) -> None:
    from spectui.ui.pair_palette import local_label, local_pairings

    labels = [local_label(p) for p in local_pairings()]
    assert "local ollama:tiny:7b + ollama:someone/tinier:q8" in labels
    assert "local ollama:someone/tinier:q8 + no draft" in labels


@pytest.mark.parametrize(
    ("text", "expected"),
    [("local_model_dirs = 'x'", "field 'local_model_dirs'"), ("colour = 1", "field 'colour'"),
     ("local_model_dirs = [", "not valid TOML")],
)
def test_a_bad_config_file_is_one_line(spectui_home: Path, text: str, expected: str) -> None:
    from spectui.config_file import load_settings

    path = spectui_home / "config" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert expected in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_target_without_draft_is_the_loaders_one_line(stores: Layout, tmp_path, capsys) -> None:
    assert main(["bench", "--target", str(tmp_path / "typo.gguf")]) == 1
    assert "model file not found" in one_error_line(capsys.readouterr().err)


def test_an_unreadable_store_is_one_skipped_line_and_the_rest_is_listed(stores: Layout, monkeypatch) -> None:
    from spectui.catalog.local import stores as store_module

    def unreadable():
        raise PermissionError(13, "Permission denied", "/root/.lmstudio/models")
        yield  # a generator, like the real walk

    monkeypatch.setattr(store_module, "walk_lmstudio", unreadable)
    found = discover()
    assert "ollama:tiny:7b" in {m.reference for m in found.models}
    assert not any(m.source == "lmstudio" for m in found.models)
    assert {p.where: p.reason for p in found.skipped}["LM Studio's folder"] == (
        "cannot be read past /root/.lmstudio/models (Permission denied)")


@run_async
async def test_the_in_app_picker_lists_a_local_model_with_its_draft_and_loads_them(stores: Layout,
                                                                                    tiny_pair) -> None:
    from spectui.ui.chat_view import NoteMessage

    notice = "draft for ollama:tiny:7b: picked automatically"
    app = RecordingApp(ui_options(tiny_pair, notice=notice))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert notice in " ".join(shown(n) for n in app.query(NoteMessage))  # the start-up notice
        await pilot.press("ctrl+p")
        await pilot.press(*"local ollama:tiny:7b")
        label = "local ollama:tiny:7b + ollama:someone/tinier:q8"
        await until(pilot, lambda: label in palette_text(app), "the local pair in the palette")
        await pilot.press("enter")
        await until(pilot, lambda: app.pair.options.pair_name == "ollama:tiny:7b", "the switch to the local pair")
        await ready(pilot)
        assert app.pair.options.target == stores.blob(stores.files.target)
        assert app.pair.options.drafter.draft == stores.blob(stores.files.draft)
        # titled by their Ollama names, not their blobs' sha256-... file names
        assert "tiny:7b + someone/tinier:q8" in app.sub_title and "sha256" not in app.sub_title
        assert "draft model someone/tinier:q8" in app.panel.state.drafter_label
        await send(pilot, "Hello from Ollama's store")
        assert app.finishes[-1].finished.text
