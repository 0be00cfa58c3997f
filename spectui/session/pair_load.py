"""What loading a pair takes and gives, for `EngineSession` (`session.loaded`) and the three front
ends that load through it (the chat app, `spectui serve`, `spectui bench`).

`LoadSpec` is what to load and how (from a chat's options or a command line); `LoadPlan` what is
decided before loading (the memory plan, the threads) and may be said before the slow part;
`LoadReport` how a load tells its front end how it goes (on the loading thread); `LoadedPair`
what the loaded pair offers (plain values: no model in them); `LoadedHealth` what a health check
of the loaded models found.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from spectui.engine.drafters.spec import DrafterInfo, DrafterSpec, HistorySource
from spectui.engine.generation_config import RecommendedSampling
from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from spectui.engine.model.loading import ProgressCallback
    from spectui.session.baseline import Calibration
    from spectui.session.memory import MemoryPlan
    from spectui.session.options import ChatOptions, ModelChoice


@dataclass(frozen=True)
class LoadSpec:
    """What to load and how."""

    target: Path
    drafter: DrafterSpec
    n_ctx: int = 4096
    n_gpu_layers: int | None = None
    threads: int | None = None
    """None: one per core other programs leave free (`machine.default_threads`), said when fewer."""
    rpc: str | None = None
    tensor_split: tuple[float, ...] | None = None
    mode: str = "auto"
    """How prompts are made (`--mode`): the chat format the pair is installed with."""
    calibration_tokens: int | None = None
    """Tokens the calibration after the load times (warm start, K = auto seeded, the baseline);
    None: no calibration (bench warms up its own way)."""
    history: HistorySource | None = None
    """The past chats the suffix drafter learns from (read where the chat store lives)."""

    @classmethod
    def of_chat(cls, options: ChatOptions, history: HistorySource | None = None) -> LoadSpec:
        """The chat app's load of `options`' pair (calibrated)."""
        return cls(options.target, options.drafter, options.n_ctx, options.n_gpu_layers, options.threads,
                   options.rpc, options.tensor_split, options.mode, options.calibration_tokens, history)

    @classmethod
    def of_command(cls, args: argparse.Namespace, choice: ModelChoice, mode: str = "auto",
                   calibration_tokens: int | None = None) -> LoadSpec:
        """A command line's load (`serve`, `bench`): `--rpc` wins over the pair's own workers."""
        return cls(choice.target, choice.drafter, args.ctx, args.n_gpu_layers, args.threads,
                   args.rpc or choice.rpc, None if args.tensor_split is None else tuple(args.tensor_split),
                   mode, calibration_tokens)


@dataclass(frozen=True)
class LoadPlan:
    """What is decided before the load: said before the slow part begins."""

    spec: LoadSpec
    memory: MemoryPlan
    threads: int
    threads_note: str | None = None
    """Why fewer threads than cores (other programs keep cores busy); None when not chosen so."""

    @property
    def warnings(self) -> list[str]:
        """The memory plan's warnings (a GPU this build cannot use first)."""
        return self.memory.warnings


@dataclass
class LoadReport:
    """How a load tells its front end how it goes (every call on the loading thread)."""

    progress: ProgressCallback | None = None
    """Each step of the files' load, 0..1 (False stops it); None: not followed (nothing to show
    it on)."""
    loaded: Callable[[LoadedPair], object] = lambda _pair: None
    """The models are loaded and installed (the calibration, if any, comes next)."""
    calibrating: Callable[[], object] = lambda: None
    """The calibration after the load begins."""


@dataclass(frozen=True)
class LoadedPair:
    """What the loaded pair offers, as plain values."""

    drafters: DrafterInfo
    """The drafters built, their labels, the default, the load's notes."""
    template: str
    """The chat format's description (its template, or why there is none)."""
    mode: str
    """How prompts are made: `chat`, `completion` (a base model continues the text) or `plain-chat`."""
    sampling: RecommendedSampling = field(default_factory=RecommendedSampling)
    """Where a reply's sampling starts with these models (their GGUF's, else llama.cpp's)."""
    draft_same_model: bool = False
    """The draft is the target's model at another precision (the low-acceptance advice differs)."""
    n_ctx: int = 0
    n_vocab: int = 0
    calibration: Calibration | None = None
    """What the calibration after the load measured (None: none was asked for, or the load's
    report has not had it yet)."""


@dataclass(frozen=True)
class LoadedHealth:
    """What `EngineSession.check_health` found."""

    fault: SpectuiError | None = None
    """Why the loaded models cannot serve the next reply (None: they can)."""
    removed: tuple[str, ...] = ()
    """Names of loaded model files no longer on disk (the loaded copy still works)."""


class ModelShape(Protocol):
    def meta(self, key: str) -> str | None: ...


SHAPE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count")


def same_model(target: ModelShape, draft: ModelShape) -> bool:
    """True when the draft has the target's architecture and shape (layers, widths, heads) in its
    GGUF metadata: the same model at another precision, as in the demo pair, not a smaller sibling."""
    arch = target.meta("general.architecture")
    if arch is None or arch != draft.meta("general.architecture"):
        return False
    return all(target.meta(f"{arch}.{key}") == draft.meta(f"{arch}.{key}") for key in SHAPE_KEYS)
