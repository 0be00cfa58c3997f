"""Fake model stores for the local-model tests: Ollama, LM Studio, the HF cache, a config folder.

`store_layout` places tiny real GGUFs (`tiny_gguf`) the way each tool does; `point_at` sets the
environment variables that make spectui look there; `downloaded_pair` records a pair as `spectui
pull` would have.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import tiny_gguf

from spectui.catalog import record

MODEL_LAYER = "application/vnd.ollama.image.model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class Files:
    """The generated models, before they are placed in stores."""

    target: Path
    draft: Path
    draft2: Path
    bad: Path
    bos: Path
    mtp: Path
    mmproj: Path


@dataclass(frozen=True)
class Layout:
    root: Path
    ollama: Path
    home: Path
    hub: Path
    extra: Path
    files: Files

    def blob(self, source: Path) -> Path:
        return self.ollama / "blobs" / f"sha256-{sha256(source)}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_files(src: Path) -> Files:
    """The models used by every store, generated once."""
    spec = tiny_gguf.TinySpec()
    return Files(
        target=tiny_gguf.write_model(src / "target.gguf", spec),
        draft=tiny_gguf.write_model(src / "draft.gguf", spec, n_layer=1),
        draft2=tiny_gguf.write_model(src / "tiny-2l.gguf", spec, n_layer=2),
        bad=tiny_gguf.write_incompatible_draft(src / "bad"),
        bos=tiny_gguf.write_model(src / "bos.gguf", tiny_gguf.TinySpec(add_bos=True), n_layer=1),
        mtp=tiny_gguf.write_model(src / "tiny-mtp.gguf", tiny_gguf.TinySpec(mtp_layers=1)),
        mmproj=tiny_gguf.write_mmproj(src / "mmproj-tiny-f16.gguf"),
    )


def ollama_model(store: Path, parts: tuple[str, str, str, str], source: Path | None, text: str | None = None) -> None:
    """A manifest at manifests/HOST/NS/NAME/TAG naming `source` as its model blob."""
    manifest = store / "manifests" / Path(*parts)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        digest = sha256(source) if source else "0" * 64
        if source:
            blob = store / "blobs" / f"sha256-{digest}"
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, blob)
        layers = [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 9},
                  {"mediaType": MODEL_LAYER, "digest": f"sha256:{digest}", "size": 1}]
        text = json.dumps({"schemaVersion": 2, "layers": layers})
    manifest.write_text(text)


def manifest_text(digest: object) -> str:
    """A manifest whose model layer names `digest` (any JSON value: hostile ones included)."""
    layers = [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 9},
              {"mediaType": MODEL_LAYER, "digest": digest, "size": 1}]
    return json.dumps({"schemaVersion": 2, "layers": layers})


def hf_link(layout: Layout, filename: str, target: str | Path) -> Path:
    """A file in the cached repo owner/tiny-GGUF's snapshot: a link to `target` (as given)."""
    link = layout.hub / "models--owner--tiny-GGUF" / "snapshots" / COMMIT / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def store_layout(root: Path, files: Files) -> Layout:
    layout = Layout(root, root / "ollama", root / "home", root / "hub", root / "extra", files)
    lib = ("registry.ollama.ai", "library")
    ollama_model(layout.ollama, (*lib, "tiny", "7b"), files.target)
    ollama_model(layout.ollama, (*lib, "tiny", "latest"), files.target)
    ollama_model(layout.ollama, ("registry.ollama.ai", "someone", "tinier", "q8"), files.draft)
    ollama_model(layout.ollama, (*lib, "broken", "latest"), None, text="{not json")
    ollama_model(layout.ollama, (*lib, "ghost", "latest"), None)
    lms = layout.home / ".lmstudio" / "models" / "pub"
    for folder, source in [("tiny-GGUF", files.draft2), ("tiny-GGUF", files.mmproj),
                           ("mixed-GGUF", files.bad), ("mixed-GGUF", files.bos), ("vision-GGUF", files.mmproj)]:
        (lms / folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, lms / folder / source.name)
    repo = layout.hub / "models--owner--tiny-GGUF"
    (repo / "blobs").mkdir(parents=True)
    shutil.copyfile(files.draft, repo / "blobs" / "etag-draft")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "tiny-draft-q.gguf").symlink_to("../../blobs/etag-draft")
    (snapshot / "partial.gguf").symlink_to("../../blobs/etag-never-finished")
    (layout.extra / "sub").mkdir(parents=True)
    shutil.copyfile(files.mtp, layout.extra / "sub" / files.mtp.name)
    return layout


def point_at(layout: Layout, monkeypatch: pytest.MonkeyPatch, spectui_home: Path, extra: bool = True) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", str(layout.ollama))
    monkeypatch.setenv("HOME", str(layout.home))
    monkeypatch.setenv("HF_HUB_CACHE", str(layout.hub))
    config = spectui_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"local_model_dirs = [{json.dumps(str(layout.extra))}]\n" if extra else "")


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root` (links not followed) with its size and mtime."""
    seen = {}
    for path in [root, *root.rglob("*")]:
        stat = path.lstat()
        seen[str(path)] = (stat.st_size if not path.is_dir() else 0, stat.st_mtime_ns)
    return seen


def downloaded_pair(folder: Path, files: Files) -> record.PulledPair:
    """A pair as `spectui pull` records it: files spectui downloaded (owned), here copies."""
    folder.mkdir(parents=True, exist_ok=True)
    target, draft = folder / "target.gguf", folder / "draft.gguf"
    shutil.copyfile(files.target, target)
    shutil.copyfile(files.draft, draft)
    owned = [record.PulledFile(path=str(p), size=p.stat().st_size, repo="o/r", filename=p.name, owned=True)
             for p in (target, draft)]
    return record.PulledPair(target=owned[:1], draft=owned[1:], adhoc=True, description="pulled",
                             pulled_at=record.now())


def only_folder(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Path:
    """spectui looks at `folder` only for models on disk (empty Ollama, LM Studio and HF stores)."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    config = spectui_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"local_model_dirs = [{json.dumps(str(folder))}]\n")
    return folder
