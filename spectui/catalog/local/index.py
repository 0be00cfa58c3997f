"""A cache of what spectui learnt about GGUF files on disk, keyed by file identity.

`paths.local_index_path()` (JSON) maps each file's resolved path to the size and mtime it had
when read, its `ModelInfo` (from the header) and its vocabulary fingerprint (from a vocab-only
load), plus compatibility verdicts between fingerprints. A file whose size or mtime changed is
read again; everything else is answered from the cache, so a second listing reads no GGUF.
The cache lives in spectui's own cache folder, never beside the models.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spectui import paths
from spectui.catalog.local.inspect import ModelInfo, info_from_header
from spectui.engine.files import gguf_file


class VocabPrint(BaseModel):
    """What llama.cpp's compatibility rule compares, with the token texts reduced to a digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_type: int
    """`llama_vocab_type` (1 SPM, 2 BPE, 3 WPM, ...)."""

    n_vocab: int
    """Number of tokens."""

    add_bos: bool
    """Whether a BOS token is added to prompts."""

    add_eos: bool
    """Whether an EOS token is added to prompts."""

    bos_id: int
    """BOS token id."""

    eos_id: int
    """EOS token id."""

    digest: str
    """sha256 over the text of every token from id 5 on (the ids llama.cpp compares)."""

    @property
    def key(self) -> str:
        """Equal keys mean identical vocabularies as far as the compatibility rule can tell."""
        flags = f"{self.vocab_type}.{self.n_vocab}.{int(self.add_bos)}{int(self.add_eos)}.{self.bos_id}.{self.eos_id}"
        return f"{flags}.{self.digest[:32]}"


class FileEntry(BaseModel):
    """One GGUF file as it was when read."""

    model_config = ConfigDict(extra="forbid")

    size: int
    """Size in bytes when read."""

    mtime_ns: int
    """Modification time (ns) when read."""

    info: ModelInfo | None = None
    """Header facts; None when the header could not be read (damaged, truncated, not GGUF)."""

    vocab: VocabPrint | None = None
    """Vocabulary fingerprint, once a pairing needed it."""

    vocab_error: str | None = None
    """Why llama.cpp could not load the vocabulary, when it could not."""


class IndexFile(BaseModel):
    """The whole cache file."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[3] = 3
    """Format version; another version is discarded and rebuilt (2: width, layers and head facts;
    3: a head's Markov head and selector, which tell DSpark and DFlash2 from DFlash)."""

    files: dict[str, FileEntry] = Field(default_factory=dict)
    """Resolved path -> what was read from it."""

    verdicts: dict[str, str | None] = Field(default_factory=dict)
    """`TARGETKEY>DRAFTKEY` (`VocabPrint.key`) -> the first mismatch, or None when compatible."""


class LocalIndex:
    """The cache, loaded once; `entry` refreshes stale files, `save` writes if anything changed."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.local_index_path()
        self.data = self._load()
        self.dirty = False

    def _load(self) -> IndexFile:
        try:
            return IndexFile.model_validate(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError):
            return IndexFile()  # absent or damaged: it is only a cache

    def entry(self, path: Path) -> FileEntry:
        """The cached entry for `path`, read again (header only) if the file changed."""
        key = str(path.resolve())
        stat = os.stat(key)
        cached = self.data.files.get(key)
        if cached is not None and cached.size == stat.st_size and cached.mtime_ns == stat.st_mtime_ns:
            return cached
        header = gguf_file.read_header(Path(key))
        info = None if header is None else info_from_header(header, path.name)
        fresh = FileEntry(size=stat.st_size, mtime_ns=stat.st_mtime_ns, info=info)
        self.data.files[key] = fresh
        self.dirty = True
        return fresh

    def verdict(self, key: str) -> tuple[bool, str | None]:
        """(known, mismatch) for a `TARGETKEY>DRAFTKEY` pair."""
        return key in self.data.verdicts, self.data.verdicts.get(key)

    def set_verdict(self, key: str, mismatch: str | None) -> None:
        self.data.verdicts[key] = mismatch
        self.dirty = True

    def mark_changed(self) -> None:
        self.dirty = True

    def save(self) -> None:
        """Write the cache (atomically), dropping files that no longer exist."""
        if not self.dirty:
            return
        from spectui.catalog.record import write_atomic

        self.data.files = {k: v for k, v in self.data.files.items() if os.path.exists(k)}
        try:
            write_atomic(self.path, self.data.model_dump_json() + "\n")
        except OSError:
            return  # a cache that cannot be written only costs time on the next listing
        self.dirty = False
