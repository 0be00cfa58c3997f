"""What a pair name resolves to (`ResolvedPair`), one row of `spectui list` (`PairStatus`), and a
catalog's pair with where it was defined (`CatalogEntry`).

Plain values with no behaviour of their own, so the demo pair and the resolver can both build them
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from spectui.catalog.schema import PairEntry

K = int | Literal["auto"]
Origin = Literal["shipped", "user"]


@dataclass(frozen=True)
class CatalogEntry:
    """A validated pair with where it was defined (`loader.load_catalog` makes them)."""

    name: str
    entry: PairEntry
    origin: Origin
    file: Path


@dataclass(frozen=True)
class ResolvedPair:
    """A pair ready to load: the first file of each model (llama.cpp finds split parts itself)."""

    name: str
    target: Path
    draft: Path | None
    """The draft model, or the MTP sidecar; None when the target's own MTP heads draft."""
    recommended_k: K
    drafter: str = "model"
    """`model` (a separate draft GGUF) or `mtp` (MTP heads in the target, or `draft` is an MTP
    assistant sidecar that shares the target's cache)."""


@dataclass(frozen=True)
class PairStatus:
    """One row of `spectui list`."""

    name: str
    description: str
    source: str
    """`hub`, `demo`, or `ad-hoc`."""
    origin: str
    """`shipped`, `user` (the user's models.toml) or `pulled` (ad-hoc, not in any catalog)."""
    pulled: bool
    size_gb: float
    """Actual size on disk when pulled, else the catalog's approximation."""
    recommended_k: K
    target: Path | None = None
    draft: Path | None = None
    license: str | None = None
    drafter: str = "model"
    """`model`, `mtp`, `eagle3` or `dflash` (see `ResolvedPair.drafter`)."""
    target_arch: str | None = None
    """llama.cpp's architecture of the target: read from the file once pulled, else the
    catalog's `target_arch`; None when unknown."""

    @property
    def hybrid(self) -> bool | None:
        """Recurrent + attention target (llama.cpp's `llm_arch_is_hybrid`); None if unknown."""
        from spectui.engine.files.archs import is_hybrid

        return None if self.target_arch is None else is_hybrid(self.target_arch)

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name, "description": self.description, "source": self.source,
            "origin": self.origin, "pulled": self.pulled, "size_gb": round(self.size_gb, 3),
            "recommended_k": self.recommended_k, "drafter": self.drafter,
            "target_arch": self.target_arch, "hybrid": self.hybrid,
            "target": str(self.target) if self.target else None,
            "draft": str(self.draft) if self.draft else None, "license": self.license,
        }
