"""Ollama's model store, read-only: names, manifests, and the GGUF blob each manifest names.

Layout (`$OLLAMA_MODELS`, default `~/.ollama/models`; the Linux service keeps its own under
`/usr/share/ollama/.ollama/models`): `manifests/HOST/NAMESPACE/NAME/TAG` is a JSON manifest whose
layer with media type `application/vnd.ollama.image.model` is the model, stored as a plain GGUF
at `blobs/sha256-<hex>`. `qwen2.5:7b` is `registry.ollama.ai/library/qwen2.5/7b`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spectui.catalog.local.confine import inside, is_dir, is_file, ollama_blob_name, relative_parts
from spectui.errors import LocalModelError

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"
SYSTEM_STORE = Path("/usr/share/ollama/.ollama/models")


def ollama_roots() -> list[Path]:
    """`$OLLAMA_MODELS` alone when set; else the user's store and the Linux service's."""
    if value := os.environ.get("OLLAMA_MODELS"):
        return [Path(value).expanduser()]
    return [Path.home() / ".ollama" / "models", SYSTEM_STORE]


@dataclass(frozen=True)
class OllamaName:
    """A model name as Ollama spells it, split into the parts of its manifest path."""

    host: str
    namespace: str
    name: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> OllamaName:
        """`NAME[:TAG]`, `NAMESPACE/NAME[:TAG]` or `HOST/NAMESPACE/NAME[:TAG]`."""
        path, sep, tag = text.rpartition(":")
        if not sep or "/" in tag:
            path, tag = text, DEFAULT_TAG
        parts = relative_parts(path) or []
        if not parts or len(parts) > 3 or relative_parts(tag) is None:
            raise LocalModelError(
                f"ollama:{text} is not an Ollama model name; write ollama:NAME[:TAG] "
                "(e.g. ollama:qwen2.5:7b or ollama:NAMESPACE/NAME:TAG)"
            )
        defaults = [DEFAULT_HOST, DEFAULT_NAMESPACE][: 3 - len(parts)]
        host, namespace, name = [*defaults, *parts]
        return cls(host, namespace, name, tag)

    @property
    def display(self) -> str:
        """The shortest spelling Ollama accepts (`ollama list` shows the same)."""
        if self.host != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.name}:{self.tag}"
        if self.namespace != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.name}:{self.tag}"
        return f"{self.name}:{self.tag}"

    @property
    def reference(self) -> str:
        return f"ollama:{self.display}"

    @property
    def manifest_relpath(self) -> Path:
        return Path("manifests", self.host, self.namespace, self.name, self.tag)


def manifest_blob(root: Path, name: OllamaName, manifest: Path) -> Path:
    """The GGUF blob an existing manifest names; `LocalModelError` if the manifest is unusable.

    The manifest and the blob must both lie inside the store (`confine.inside`), and the digest
    must be `sha256:` and 64 hex digits: a manifest naming `../../elsewhere` is refused.
    """
    pull = f"run `ollama pull {name.display}` again"
    inside(root / "manifests", manifest, f"Ollama's manifests in {root}")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layers = data["layers"]
        digests = [layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_LAYER]
    except OSError as error:
        raise LocalModelError(f"ollama: cannot read {manifest} ({error.strerror}); {pull}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        what = f"not valid JSON ({error})" if isinstance(error, ValueError) else "not a model manifest"
        raise LocalModelError(f"ollama: the manifest of {name.display} ({manifest}) is {what}; {pull}") from None
    if not digests:
        raise LocalModelError(
            f"ollama: {name.display} has no GGUF layer ({MODEL_LAYER}) in {manifest}; "
            "Ollama keeps this model in a format llama.cpp cannot open"
        )
    blob_name = ollama_blob_name(digests[0])
    if blob_name is None:
        shown = repr(digests[0])[:90]
        raise LocalModelError(
            f"ollama: {name.display} names a malformed blob {shown} in {manifest} (a digest is sha256: "
            f"and 64 hex digits); {pull}"
        )
    blob = root / "blobs" / blob_name
    if not is_file(blob):
        raise LocalModelError(
            f"ollama: {name.display} names blob {blob.name} which is missing from {root / 'blobs'}; {pull}"
        )
    return inside(root / "blobs", blob, f"Ollama's blobs in {root}")


def _existing_tags(roots: list[Path], name: OllamaName) -> list[str]:
    tags: set[str] = set()
    for root in roots:
        folder = (root / name.manifest_relpath).parent
        if is_dir(folder):
            tags.update(p.name for p in folder.iterdir() if is_file(p) and not p.name.startswith("."))
    return sorted(tags)


def resolve(text: str) -> Path:
    """The GGUF blob of `ollama:TEXT`; a one-line `LocalModelError` naming where it looked."""
    name = OllamaName.parse(text)
    roots = ollama_roots()
    for root in roots:
        manifest = root / name.manifest_relpath
        if is_file(manifest):
            return manifest_blob(root, name, manifest)
    stores = [r for r in roots if is_dir(r)]
    if not stores:
        where = " or ".join(str(r) for r in roots)
        raise LocalModelError(
            f"ollama: no model store at {where}; set OLLAMA_MODELS if Ollama keeps its models elsewhere"
        )
    tags = _existing_tags(stores, name)
    other = f" (tags of {name.name} here: {', '.join(tags)})" if tags else ""
    raise LocalModelError(
        f"ollama: no model {name.display} in {' or '.join(str(s) for s in stores)} "
        f"({name.manifest_relpath.as_posix()}){other}; `ollama list` shows what is there"
    )


def walk() -> Iterator[tuple[str, str, Path | None, str | None]]:
    """Every manifest in every store: (display name, reference, blob or None, problem or None)."""
    for root in ollama_roots():
        manifests = root / "manifests"
        if not is_dir(manifests):
            continue
        for manifest in sorted(manifests.glob("*/*/*/*")):
            parts = manifest.relative_to(manifests).parts
            if any(part.startswith(".") for part in parts) or not is_file(manifest):
                continue
            name = OllamaName(*parts)
            try:
                yield name.display, name.reference, manifest_blob(root, name, manifest), None
            except LocalModelError as error:
                yield name.display, name.reference, None, str(error)
