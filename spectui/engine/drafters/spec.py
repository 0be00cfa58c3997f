"""What a run asks of its drafter (`DrafterSpec`), and how a drafter kind says what it needs and how
it is built (`DrafterKind`). Kind modules import this; `kinds.py` lists them, and the registry in
`__init__` imports their modules."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from spectui.engine.model.llama_model import LlamaModel
    from spectui.engine.model.loading import ProgressCallback
    from spectui.engine.step.drafter import Drafter

AUTO_KIND = "auto"
"""Let spectui pick: the first of `DEFAULT_ORDER` that the loaded models can run."""
NONE_KIND = "none"
"""Speculation off: the target alone (what `-k 0` measures as the baseline)."""

HistorySource = Callable[["LlamaModel"], Iterable[Sequence[int]]]
"""Given the loaded target: past conversations, oldest first, as that target's token ids
(`spectui.session.history.history_source` reads them from the chat store)."""


class TargetOptions(TypedDict, total=False):
    """How the target must be loaded for a kind (keyword arguments of `LlamaModel.load`)."""

    load_mtp: bool
    """Load the MTP (nextn) layers the target's GGUF carries (llama.cpp skips them by default)."""


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter to run and what it needs."""

    kind: str = AUTO_KIND
    """A registered kind (`model`), a chain of them (`model+ngram`), `auto` or `none`."""
    draft: Path | None = None
    """The draft GGUF for kinds that need one (a separate draft model, an MTP sidecar)."""
    draft_n_gpu_layers: int | None = None
    """Draft layers to offload; None: as many as the target's setting allows."""

    @property
    def members(self) -> list[str]:
        return [] if self.kind in (AUTO_KIND, NONE_KIND) else self.kind.split("+")


@dataclass
class BuildContext:
    """What a kind may use to build its drafter."""

    target: LlamaModel
    n_ctx: int
    n_threads: int | None = None
    target_n_gpu_layers: int | None = None
    progress: ProgressCallback | None = None
    history: HistorySource | None = None
    """Past conversations, for drafters that learn from them (called at most once, at build)."""
    cleanup: list[Drafter] = field(default_factory=list)


Needs = Literal["nothing", "draft model", "head"]
"""What a kind needs to load beside the target: nothing (it may still take an optional file, as
MTP takes an assistant sidecar), a draft model (a smaller GGUF with the target's tokenizer), or a
head (a GGUF that drafts from the target's hidden states); both given as `--draft PATH`."""


@dataclass(frozen=True)
class DrafterKind:
    """A registered kind: everything about it in one place (the line in `KINDS`), and the module
    that builds it, which the registry imports when it builds one (`spectui.engine.drafters`:
    the hooks that module defines)."""

    name: str
    """What `--drafter`, the stats and K = auto call it: its drafters' `source`."""
    summary: str
    """One line for `--help` and the UI."""
    label: str
    """What the panel calls its drafters ("draft model"; a drafter adds the file it read). Its
    first word names the kind within its family in the colour legend ("n-gram" lookup)."""
    colour: str
    """The colour of tokens accepted from it in the app (a Rich colour name)."""
    family: str
    """The legend's words for its colour: kinds of one family share a swatch ("lookup")."""
    max_k: int
    """The most tokens its drafters propose in one cycle (one of them may propose fewer: a DFlash
    head's block); a fixed K is capped to it."""
    needs: Needs
    """What it needs to load beside the target (`Needs`)."""
    rank: int
    """Order within a chain: 0 for a free lookup, higher for drafters that run a network."""
    module: str
    """Its module in this package (`model` for `drafters/model.py`)."""

    @property
    def needs_draft_file(self) -> bool:
        return self.needs != "nothing"


@dataclass(frozen=True)
class DrafterInfo:
    """The drafters a loaded generator offers (the UI asks the generator, never the options)."""

    kinds: tuple[str, ...] = ()
    """Kinds the user can switch between (`model`, `model+ngram`, …); empty: no speculation."""
    default: str = "none"
    labels: dict[str, str] = field(default_factory=dict)
    """Kind -> what the panel calls it ("draft model NAME")."""
    notes: tuple[str, ...] = ()
    """Why a drafter that was asked for is not running, one line each."""

    @property
    def can_speculate(self) -> bool:
        return bool(self.kinds)

    def label(self, kind: str | None) -> str:
        return self.labels.get(kind or self.default, "none")
