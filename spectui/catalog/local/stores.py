"""Where GGUF models already are: Ollama, LM Studio, the Hugging Face cache, configured folders.

Everything here only lists directories and reads small files (manifests, `refs/main`); GGUF
headers are read elsewhere (`spectui.catalog.local.index`). Nothing is ever written, copied or
locked in another tool's store.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from spectui.catalog.local import ollama
from spectui.catalog.local.confine import is_dir, is_file, is_inside

Source = Literal["ollama", "lmstudio", "hf", "folder", "file"]
LMSTUDIO_HINT = "`lms ls` (or LM Studio's My Models) shows what is there"


@dataclass(frozen=True)
class Found:
    """A GGUF file a store names, before its header is read."""

    source: Source
    name: str
    """The name its own tool shows (`qwen2.5:7b`, `PUBLISHER/REPO/FILE.gguf`, `OWNER/REPO:FILE`)."""
    reference: str
    """What `--target`/`--draft` accept for it (`ollama:qwen2.5:7b`, a path, ...)."""
    path: Path
    """The file llama.cpp opens (for a split model, the first part)."""


@dataclass(frozen=True)
class Problem:
    """Something in a store that cannot be used as a model, and why, in one line."""

    where: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"where": self.where, "reason": self.reason}


def lmstudio_roots() -> list[Path]:
    """LM Studio's models folders: the current one and the one older versions used."""
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def hf_cache_root() -> Path:
    """huggingface_hub's cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else its default)."""
    from spectui.catalog.hub import hub_cache_dir

    return hub_cache_dir()


def hf_repo_folder(repo: str) -> str:
    return "models--" + repo.replace("/", "--")


def hf_snapshots(folder: Path) -> list[Path]:
    """A cached repo's snapshots, the one `refs/main` points at first, then newest first."""
    snapshots = folder / "snapshots"
    if not is_dir(snapshots):
        return []
    try:
        found = sorted((s for s in snapshots.iterdir() if is_dir(s)), key=_mtime, reverse=True)
    except OSError:  # this user may not list it: as if nothing were cached
        return []
    try:
        main = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return found
    return sorted(found, key=lambda s: s.name != main)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def walk_ollama() -> Iterator[Found | Problem]:
    for name, reference, blob, problem in ollama.walk():
        yield Found("ollama", name, reference, blob) if blob is not None else Problem(reference, problem or "")


def walk_lmstudio() -> Iterator[Found | Problem]:
    seen: set[str] = set()
    for root in lmstudio_roots():
        for path in sorted(root.glob("*/*/*.gguf")):
            name = path.relative_to(root).as_posix()
            if name not in seen and is_file(path):
                seen.add(name)
                yield Found("lmstudio", name, f"lmstudio:{name}", path)


def walk_hf() -> Iterator[Found | Problem]:
    root = hf_cache_root()
    if not root.is_dir():
        return
    for folder in sorted(root.glob("models--*--*")):
        repo = folder.name.removeprefix("models--").replace("--", "/", 1)
        seen: set[str] = set()
        for snapshot in hf_snapshots(folder):
            for path in sorted(snapshot.rglob("*.gguf")):
                filename = path.relative_to(snapshot).as_posix()
                if filename in seen:
                    continue
                seen.add(filename)
                reference = f"hf:{repo}:{filename}"
                if is_file(path) and is_inside(folder, path):
                    yield Found("hf", f"{repo}:{filename}", reference, path)
                elif is_file(path):
                    yield Problem(reference, f"leads outside the cache's folder of {repo}; not used")
                else:
                    yield Problem(reference, "only partly downloaded (its blob is missing from the cache)")


def walk_folders(folders: list[Path]) -> Iterator[Found | Problem]:
    for folder in folders:
        if not is_dir(folder):
            yield Problem(str(folder), "named in local_model_dirs (config.toml) but not a folder")
            continue
        for path in sorted(folder.rglob("*.gguf")):
            if is_file(path):
                yield Found("folder", path.relative_to(folder).as_posix(), str(path), path)


def walk_all(folders: list[Path]) -> Iterator[Found | Problem]:
    """Every store in turn: Ollama, LM Studio, the Hugging Face cache, then the extra folders.

    A store that cannot be read (permissions) becomes one `Problem`; the others are still walked.
    """
    walks = [("Ollama's store", walk_ollama()), ("LM Studio's folder", walk_lmstudio()),
             ("the Hugging Face cache", walk_hf()), ("local_model_dirs", walk_folders(folders))]
    for label, walk in walks:
        try:
            yield from walk
        except OSError as error:
            yield Problem(label, f"cannot be read past {error.filename} ({error.strerror})")
