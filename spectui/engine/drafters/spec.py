"""What a run asks of its drafter (`DrafterSpec`), and how a drafter kind says what it needs and how
it is built (`DrafterKind`). Kind modules import this; the registry in `__init__` lists them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from spectui.engine.drafters.base import Drafter
    from spectui.engine.model import LlamaModel, ProgressCallback

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


@dataclass(frozen=True)
class DrafterKind:
    """A registered kind: what it is, what it needs, and the module that builds it.

    The module (in this package) defines `build(spec, ctx) -> Drafter` and may define
    `unavailable(spec, ctx) -> str | None` (why these models cannot run it) and
    `target_options(spec, target_path) -> TargetOptions` (keyword arguments for `LlamaModel.load` of the
    target, asked before it loads: MTP heads need `load_mtp`). It is imported only when a
    drafter is built, so listing kinds (`--help`) stays instant.
    """

    name: str
    summary: str
    """One line for `--help` and the UI."""
    needs_draft_file: bool
    rank: int
    """Order within a chain: 0 for a free lookup, higher for drafters that run a network."""
    module: str

    def _module(self) -> ModuleType:
        return importlib.import_module(f"spectui.engine.drafters.{self.module}")

    def build(self, spec: DrafterSpec, ctx: BuildContext) -> Drafter:
        build: Callable[[DrafterSpec, BuildContext], Drafter] = self._module().build
        return build(spec, ctx)

    def unavailable(self, spec: DrafterSpec, ctx: BuildContext) -> str | None:
        check: Callable[[DrafterSpec, BuildContext], str | None] | None = getattr(
            self._module(), "unavailable", None)
        return check(spec, ctx) if check is not None else None

    def target_options(self, spec: DrafterSpec, target: Path) -> TargetOptions:
        hook: Callable[[DrafterSpec, Path], TargetOptions] | None = getattr(self._module(), "target_options", None)
        return hook(spec, target) if hook is not None else {}


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
