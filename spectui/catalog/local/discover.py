"""`discover`: the language models on disk, with their facts, and what was skipped and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from spectui.catalog.local.index import LocalIndex
from spectui.catalog.local.inspect import ModelInfo, skip_reason
from spectui.catalog.local.stores import Found, Problem, Source, walk_all
from spectui.catalog.schema import SPLIT_NAME, split_parts


@dataclass(frozen=True)
class LocalModel:
    """A language model on disk, ready to be a `--target` or `--draft`."""

    name: str
    source: Source
    reference: str
    path: Path
    """The file llama.cpp opens (the first part of a split model)."""
    size: int
    """Bytes on disk, all parts together."""
    info: ModelInfo
    parameters: int
    """Parameters of the whole model (all parts)."""

    @property
    def key(self) -> Path:
        """Identity of the file: two references to the same blob are the same model."""
        return self.path.resolve()

    def as_json(self) -> dict[str, object]:
        info = self.info
        return {
            "name": self.name, "source": self.source, "reference": self.reference, "path": str(self.path),
            "arch": info.arch, "parameters": self.parameters, "quantization": info.quantization,
            "size_bytes": self.size, "context_length": info.context_length, "mtp_layers": info.mtp_layers,
            "has_mtp": info.mtp_layers > 0, "model_name": info.name, "basename": info.basename,
            "split_parts": info.split_count,
        }


@dataclass
class Discovery:
    """Everything found: usable models, and one line for each file or entry that is not."""

    models: list[LocalModel] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)

    def find(self, path: Path) -> LocalModel | None:
        key = path.resolve()
        return next((m for m in self.models if m.key == key), None)


def is_later_split_part(path: Path) -> bool:
    """`x-00002-of-00003.gguf` and on: listed once, through the first part."""
    match = SPLIT_NAME.match(path.name)
    return match is not None and int(match["part"]) > 1


def describe(found: Found, index: LocalIndex) -> LocalModel | Problem:
    """Read (or recall) the header of a found file and decide whether it is a usable model."""
    try:
        entry = index.entry(found.path)
    except OSError as error:
        return Problem(found.reference, f"cannot be read ({error.strerror})")
    if entry.info is None:
        from spectui.catalog.local.origin import refetch_hint

        return Problem(found.reference, "not a readable GGUF (its header is damaged or truncated); "
                       f"{refetch_hint(found.path)}")
    reason = skip_reason(entry.info)
    if reason is not None:
        return Problem(found.reference, reason)
    size, parameters = entry.size, entry.info.parameters
    parts = split_parts(found.path.name)
    for part in parts[1:]:
        try:
            other = index.entry(found.path.with_name(part))
        except OSError:
            return Problem(found.reference, f"split model without its part {part}; download it again")
        size += other.size
        parameters += other.info.parameters if other.info else 0
    return LocalModel(found.name, found.source, found.reference, found.path, size, entry.info, parameters)


def describe_path(path: Path, index: LocalIndex) -> LocalModel | Problem:
    """A file named by path (not found in any store)."""
    return describe(Found("file", path.name, str(path), path), index)


def discover(folders: list[Path] | None = None, index: LocalIndex | None = None) -> Discovery:
    """Walk every store; `folders` default to `local_model_dirs` from `config.toml`.

    With `index` None a fresh one is loaded and saved afterwards.
    """
    if folders is None:
        from spectui.config_file import load_settings

        folders = load_settings().model_dirs()
    own_index = index is None
    index = index or LocalIndex()
    result = Discovery()
    seen: set[Path] = set()
    for item in walk_all(folders):
        if isinstance(item, Problem):
            result.skipped.append(item)
            continue
        key = item.path.resolve()
        if key in seen or is_later_split_part(item.path):
            continue
        seen.add(key)
        described = describe(item, index)
        if isinstance(described, LocalModel):
            result.models.append(described)
        else:
            result.skipped.append(described)
    if own_index:
        index.save()
    return result
