"""Where a model file came from, told from its path: the name its tool gives it, and how to get
it again.

An Ollama model is a blob named by its digest (`blobs/sha256-…`): the app and `spectui bench`
title it by its Ollama name (`qwen2.5:7b`, from the store's manifests), and a damaged or truncated
blob is fetched again with `ollama pull NAME`, not `spectui pull`. A file spectui pulled names
its pair; a file in the Hugging Face cache names its repo; one in LM Studio's folder, LM Studio.
Everything here only reads (manifests, the record of pulled pairs), and never fails: a store it
cannot read just gives a plainer answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from spectui.catalog.local.confine import is_dir, is_file

OLLAMA_BLOB = re.compile(r"sha256-[0-9a-f]{64}")
HF_SNAPSHOT = re.compile(r"models--(?P<owner>[^/]+?)--(?P<repo>[^/]+)/snapshots/[^/]+/(?P<file>.+)")


@dataclass(frozen=True)
class Origin:
    """What a model file is to the user."""

    name: str
    """How to title it: the Ollama name for an Ollama blob, else the file's name."""
    refetch: str
    """What to do about a damaged copy: "download it again: `ollama pull qwen2.5:7b`"."""


def origin_of(path: Path) -> Origin:
    """The origin of `path`, from the first that knows it: spectui's record of pulled pairs,
    Ollama's manifests, the Hugging Face cache's layout, LM Studio's folders."""
    if (pair := _pulled_pair(path)) is not None:
        return Origin(path.name, f"download it again: `spectui pull {pair}`")
    if OLLAMA_BLOB.fullmatch(path.name) and path.parent.name == "blobs":
        name = _ollama_name(path)
        if name is not None:
            return Origin(name, f"download it again: `ollama pull {name}`")
        return Origin(path.name, "download it again with `ollama pull` (the model whose blob it is)")
    if match := HF_SNAPSHOT.search(path.as_posix()):
        repo = f"{match['owner']}/{match['repo']}"
        return Origin(path.name, f"download it again: `hf download {repo} {match['file']}`")
    if _in_lmstudio(path):
        return Origin(path.name, "download it again in LM Studio")
    return Origin(path.name, "download it again")


def display_name(path: Path) -> str:
    return origin_of(path).name


def refetch_hint(path: Path) -> str:
    return origin_of(path).refetch


def _pulled_pair(path: Path) -> str | None:
    from spectui.catalog import record
    from spectui.errors import SpectuiError

    try:
        pairs = record.read_record().pairs
    except (SpectuiError, OSError):
        return None
    for name, pair in pairs.items():
        if any(Path(f.path) == path and f.owned for f in pair.files()):
            return name
    return None


def _ollama_name(blob: Path) -> str | None:
    """The first name (in the store's sorted order, as `spectui list --local` lists it) whose
    manifest names `blob` as its model layer."""
    from spectui.catalog.local.ollama import MODEL_LAYER, OllamaName

    manifests = blob.parent.parent / "manifests"
    if not OLLAMA_BLOB.fullmatch(blob.name) or not is_dir(manifests):
        return None
    digest = "sha256:" + blob.name.removeprefix("sha256-")
    try:
        candidates = sorted(manifests.glob("*/*/*/*"))
    except OSError:
        return None
    for manifest in candidates:
        parts = manifest.relative_to(manifests).parts
        if any(part.startswith(".") for part in parts) or not is_file(manifest):
            continue
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8"))["layers"]
            digests = [layer.get("digest") for layer in layers if layer.get("mediaType") == MODEL_LAYER]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if digests and digests[0] == digest:
            return OllamaName(*parts).display
    return None


def _in_lmstudio(path: Path) -> bool:
    from spectui.catalog.local.stores import lmstudio_roots

    return any(path.is_relative_to(root) for root in lmstudio_roots())
