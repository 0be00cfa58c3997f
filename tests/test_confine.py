"""Paths from outside stay in their store: Ollama digests, `hf:` files, `lmstudio:` parts, config
folders; and a property test (hypothesis) over reference strings, manifest contents and cache
links for the three store resolvers: never a path outside the store, never a traceback, one line.

Stores are laid out by `local_stores` with tiny real GGUFs. A test that plants something hostile
lays out its own copy (`own`), so the shared layout stays as the other tests expect.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_output import one_error_line
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from local_stores import (
    COMMIT,
    Files,
    Layout,
    hf_link,
    manifest_text,
    ollama_model,
    point_at,
    store_layout,
    write_files,
)

from spectui import safe_text
from spectui.catalog.local import discover, ollama, resolve_reference
from spectui.cli import main
from spectui.errors import LocalModelError, SpectuiError

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
"""Derandomized (the same examples on every run and host: the suite must not flake), no example
database written into the checkout."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return write_files(tmp_path_factory.mktemp("models"))


BAIT = "bait.gguf"
"""A model outside every store, beside them: what an escape would reach (and could load)."""


@pytest.fixture(scope="module")
def layout(files: Files, tmp_path_factory: pytest.TempPathFactory) -> Layout:
    made = store_layout(tmp_path_factory.mktemp("stores"), files)
    shutil.copyfile(files.draft, made.root / BAIT)
    return made


@pytest.fixture
def stores(layout: Layout, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Layout:
    point_at(layout, monkeypatch, spectui_home)
    return layout


@pytest.fixture
def own(files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Layout:
    """A layout of this test's own, to plant hostile entries in, with bait outside its stores
    (`bait.gguf` beside them and in the HF cache's root, `x-y` where `../../x:y` as a digest led)
    that an escape would reach."""
    mine = store_layout(tmp_path / "stores", files)
    for bait in [mine.root / BAIT, mine.hub / BAIT, mine.root / "x-y", mine.ollama / "x-y",
                 mine.root / "outside" / "evil-abc"]:
        bait.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files.target, bait)
    point_at(mine, monkeypatch, spectui_home)
    return mine


def refused(reference: str) -> str:
    """The one line `resolve_reference` refuses `reference` with."""
    with pytest.raises(LocalModelError) as caught:
        resolve_reference(reference)
    message = str(caught.value)
    assert "\n" not in message and safe_text.is_safe(message)
    return message


def within(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


# ----- Ollama: a digest is sha256: and 64 hex digits -------------------------------------------


@pytest.mark.parametrize("digest", [
    "../../outside/evil:abc",            # the sweep's case: resolved to $OLLAMA_MODELS/../outside/evil-abc
    "sha256:../../../outside/evil-abc",
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 65,
    "sha256:" + "A" * 64,
    "sha256:" + "a" * 64 + "/../../x",
    "sha512:" + "a" * 64,
    "sha256-" + "a" * 64,
    5, None, ["sha256:" + "a" * 64],
])
def test_an_ollama_manifest_cannot_name_a_blob_outside_the_store(own: Layout, digest: object, capsys) -> None:
    outside = own.root / "outside"  # holds evil-abc: where the old code went for the first case
    ollama_model(own.ollama, ("registry.ollama.ai", "library", "evil", "latest"), None, text=manifest_text(digest))
    message = refused("ollama:evil")
    assert "names a malformed blob" in message and "sha256: and 64 hex digits" in message
    assert "ollama pull evil:latest" in message
    found = discover()
    assert not any(within(m.path, outside) for m in found.models)
    assert "malformed blob" in {p.where: p.reason for p in found.skipped}["ollama:evil:latest"]
    assert main(["bench", "--target", "ollama:evil"]) == 1
    assert "malformed blob" in one_error_line(capsys.readouterr().err)


def test_a_blob_or_manifest_linked_out_of_the_store_is_refused(own: Layout) -> None:
    outside = own.root / "outside.gguf"
    shutil.copyfile(own.files.target, outside)
    digest = "b" * 64
    (own.ollama / "blobs" / f"sha256-{digest}").symlink_to(outside)
    ollama_model(own.ollama, ("registry.ollama.ai", "library", "linked", "latest"), None,
                 text=manifest_text(f"sha256:{digest}"))
    assert "outside Ollama's blobs" in refused("ollama:linked")
    manifest = own.ollama / "manifests" / "registry.ollama.ai" / "library" / "away" / "latest"
    manifest.parent.mkdir(parents=True)
    elsewhere = own.root / "manifest.json"
    elsewhere.write_text(manifest_text(f"sha256:{digest}"))
    manifest.symlink_to(elsewhere)
    assert "outside Ollama's manifests" in refused("ollama:away")
    assert not any(within(m.path, outside) for m in discover().models)


@pytest.mark.parametrize("name", ["a/../b", "../x", "x:..", "x:.", "a\\b", "a\0b", "/abs", "a//b", "x:"])
def test_an_ollama_name_is_only_names(stores: Layout, name: str) -> None:
    assert "is not an Ollama model name" in refused(f"ollama:{name}")


# ----- hf: FILE is relative, and stays in the repo's folder of the cache -------------------------


def test_an_hf_file_must_be_relative(stores: Layout, tmp_path: Path) -> None:
    anywhere = tmp_path / "anywhere.gguf"
    shutil.copyfile(stores.files.draft, anywhere)
    for body in [str(anywhere), "../../../x.gguf", "a//b.gguf", "./tiny-draft-q.gguf", "a\\..\\b.gguf"]:
        assert "write hf:OWNER/REPO:FILE.gguf" in refused(f"hf:owner/tiny-GGUF:{body}")


def test_the_caches_own_links_work_and_a_link_out_of_the_repo_folder_is_refused(own: Layout) -> None:
    snapshot_file = resolve_reference("hf:owner/tiny-GGUF:tiny-draft-q.gguf")  # snapshot -> ../../blobs
    assert snapshot_file.parent.name == COMMIT and snapshot_file.resolve().parent.name == "blobs"
    outside = own.root / "outside.gguf"
    shutil.copyfile(own.files.draft, outside)
    hf_link(own, "escape.gguf", outside)
    hf_link(own, "sub/up.gguf", "../../../../../outside.gguf")
    for name in ["escape.gguf", "sub/up.gguf"]:
        assert "outside the cache's folder of owner/tiny-GGUF" in refused(f"hf:owner/tiny-GGUF:{name}")
    found = discover()
    assert not any(within(m.path, outside) for m in found.models)
    skipped = {p.where: p.reason for p in found.skipped}
    assert skipped["hf:owner/tiny-GGUF:escape.gguf"].startswith("leads outside the cache's folder")


# ----- lmstudio: PUBLISHER/REPO[/FILE], relative parts only ---------------------------------------


@pytest.mark.parametrize("body", ["pub/../../x", "/etc/passwd", "pub/tiny-GGUF/../../../x.gguf", "pub//tiny-GGUF",
                                  "pub/tiny-GGUF/./tiny-2l.gguf", "pub\\tiny-GGUF", "pub/tiny\0GGUF"])
def test_an_lmstudio_reference_is_only_names_inside_the_folder(stores: Layout, body: str) -> None:
    assert "write lmstudio:PUBLISHER/REPO[/FILE.gguf]" in refused(f"lmstudio:{body}")


# ----- config.toml: every problem one line naming the file, the field, what to write --------------


@pytest.mark.parametrize(("text", "expected"), [
    (b'local_model_dirs = ["~nosuchuser/models"]', "field 'local_model_dirs': '~nosuchuser/models': "
                                                   "~nosuchuser names no user here; write the folder's full path"),
    (b'local_model_dirs = ["models"]', "'models' is a relative path"),
    (b'local_model_dirs = ["\xff\xfe"]', "not UTF-8 text (byte 0xff at offset 21); save it as UTF-8"),
    (b"local_model_dirs = [1]", "field 'local_model_dirs.0'"),
])
def test_a_config_problem_is_one_line_naming_file_field_and_fix(spectui_home: Path, text: bytes, expected: str,
                                                                capsys) -> None:
    config = spectui_home / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_bytes(text)
    assert main(["list", "--local"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert str(config) in line and expected in line


def test_a_home_folder_in_config_is_expanded(spectui_home: Path, monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    from spectui.config_file import load_settings

    monkeypatch.setenv("HOME", str(tmp_path))
    config = spectui_home / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('local_model_dirs = ["~/models", "/mnt/gguf"]')
    assert load_settings().model_dirs() == [tmp_path / "models", Path("/mnt/gguf")]


# ----- the property: any reference, any manifest, any cache link ----------------------------------

PATHISH = st.lists(st.sampled_from(["tiny", "7b", "latest", "pub", "tiny-GGUF", "tiny-2l.gguf", "owner",
                                    "tiny-draft-q.gguf", ".gguf", "..", ".", "/", ":", "\\", "~", "\0",
                                    "\x1b]0;x\x07", "\n", " ", "someone", "tinier", "q8", "sha256-",
                                    "registry.ollama.ai", "library", "-", BAIT, "a" * 300]), max_size=12).map("".join)
PREFIX = st.sampled_from(["ollama:", "lmstudio:", "hf:", "hf:owner/tiny-GGUF:", "lmstudio:pub/tiny-GGUF/"])


def references(bait: Path) -> st.SearchStrategy[str]:
    """Reference strings: store-like words and separators, any text, and the bait's absolute path
    or a climb of `..` to it after any prefix."""
    climb = st.integers(0, 8).map(lambda n: "../" * n + BAIT)
    return st.tuples(PREFIX, st.one_of(PATHISH, st.text(max_size=40), st.just(str(bait)), climb)).map("".join)


def confined(reference: str, path: Path, layout: Layout) -> bool:
    """`path` lies where the reference's store keeps its models, links followed."""
    if reference.startswith("ollama:"):
        return within(path, layout.ollama / "blobs")
    if reference.startswith("lmstudio:"):
        return within(path, layout.home / ".lmstudio" / "models")
    repo = reference.removeprefix("hf:").partition(":")[0]
    return within(path, layout.hub / ("models--" + repo.replace("/", "--")))


def one_line_or_confined(reference: str, layout: Layout) -> None:
    try:
        path = resolve_reference(reference)
    except LocalModelError as error:
        message = str(error)
        assert message and "\n" not in message and safe_text.is_safe(message), message
        return
    assert path.is_file() and confined(reference, path, layout), (reference, path)


@PROPERTY
@given(data=st.data())
def test_any_reference_resolves_inside_its_store_or_is_one_line(stores: Layout, data: st.DataObject) -> None:
    one_line_or_confined(data.draw(references(stores.root / BAIT)), stores)


@PROPERTY
@given(reference=st.sampled_from(["ollama:tiny:7b", "lmstudio:pub/tiny-GGUF", "lmstudio:pub/mixed-GGUF/bos.gguf",
                                  "hf:owner/tiny-GGUF:tiny-draft-q.gguf"]))
def test_the_property_holds_for_references_that_resolve(stores: Layout, reference: str) -> None:
    resolve_reference(reference)  # these do resolve: the property above is not only about refusals
    one_line_or_confined(reference, stores)


DIGEST = st.one_of(
    st.tuples(st.sampled_from(["", "../", "../../", "../../../", "sha256:../"]),  # `ALGO:HEX` -> blobs/ALGO-HEX
              st.sampled_from(["x", "outside/evil", "blobs/x", "sha256"]), st.just(":"),
              st.sampled_from(["y", "abc", "a" * 64])).map("".join),
    st.text(max_size=80),
    st.tuples(st.sampled_from(["sha256:", "sha256-", "sha512:", ""]),
              st.text(alphabet="0123456789abcdefABCDEF./\\:-", min_size=60, max_size=70)).map("".join),
    st.integers(), st.none(), st.booleans(), st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)
MANIFEST = st.one_of(
    DIGEST.map(manifest_text),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                     st.sampled_from(["layers", "mediaType", "digest", "schemaVersion"]), inner, max_size=3),
                 max_leaves=8).map(json.dumps),
)


@PROPERTY
@given(manifest=MANIFEST)
@example(manifest=manifest_text("../../outside/evil:abc"))  # the sweep's case, always tried
@example(manifest=manifest_text("../../x:y"))
def test_any_manifest_names_a_blob_inside_the_store_or_is_one_line(own: Layout, manifest: str) -> None:
    target = own.ollama / "manifests" / "registry.ollama.ai" / "library" / "probe" / "latest"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(manifest, encoding="latin-1")
    one_line_or_confined("ollama:probe", own)
    for _name, _reference, blob, problem in ollama.walk():  # what `spectui list --local` walks
        if blob is None:
            assert problem and safe_text.is_safe(str(LocalModelError(problem)))
        else:
            assert within(blob, own.ollama / "blobs")


LINK_TARGET = st.one_of(
    st.lists(st.sampled_from(["..", ".", "blobs", "etag-draft", "snapshots", COMMIT, BAIT, "x"]),
             min_size=1, max_size=8).map("/".join),
    st.tuples(st.integers(0, 7), st.sampled_from([BAIT, "blobs/etag-draft", "x"])).map(lambda t: "../" * t[0] + t[1]),
    st.sampled_from(["/", "/etc/passwd", "/tmp", ""]).map(lambda p: p + "x.gguf"),
)


@PROPERTY
@given(link=LINK_TARGET, main_ref=st.text(max_size=50))
@example(link=f"../../../../{BAIT}", main_ref=COMMIT)  # out of the repo folder to the stores' root
@example(link=f"../../../{BAIT}", main_ref="")
def test_any_cache_link_or_ref_stays_in_the_repo_folder_or_is_one_line(own: Layout, link: str,
                                                                         main_ref: str) -> None:
    repo = own.hub / "models--owner--tiny-GGUF"
    probe = repo / "snapshots" / COMMIT / "probe.gguf"
    if probe.is_symlink() or probe.exists():
        probe.unlink()
    probe.symlink_to(link)
    with open(repo / "refs" / "main", "w", encoding="utf-8", errors="surrogateescape") as refs:
        refs.write(main_ref)
    one_line_or_confined("hf:owner/tiny-GGUF:probe.gguf", own)
    for model in discover().models:
        if model.source == "hf":
            assert within(model.path, repo)


def test_errors_from_outside_stay_one_terminal_safe_line(stores: Layout, capsys) -> None:
    hostile = "evil\x1b]0;PWNED\x07\x1b[31mred\nsecond\x9b2J"
    for reference in [f"ollama:{hostile}", f"lmstudio:pub/{hostile}", f"hf:owner/tiny-GGUF:{hostile}.gguf"]:
        assert main(["bench", "--target", reference]) == 1
        err = capsys.readouterr().err
        line = one_error_line(err)
        assert err == line + "\n" and safe_text.is_safe(line)
        assert "\\x1b]0;PWNED\\x07" in line and "\\nsecond\\x9b2J" in line
    error = SpectuiError("a\x1bb")
    assert str(error) == "a\\x1bb" and error.args == ("a\x1bb",)  # shown escaped, kept as given
    assert os.environ["OLLAMA_MODELS"] == str(stores.ollama)


@pytest.mark.parametrize("spec", ["owner/repo:/etc/x.gguf", "owner/repo:../x.gguf", "owner/repo:a//x.gguf"])
def test_an_ad_hoc_pull_names_only_files_inside_the_repo(spec: str, spectui_home: Path, capsys) -> None:
    assert main(["pull", "--target", spec, "--draft", "owner/repo:d.gguf", "--name", "p"]) == 1
    assert "is neither an existing file nor REPO:FILE" in one_error_line(capsys.readouterr().err)
