"""Every message a worker thread posts to the UI.

Workers never touch widgets or the app's state: they post one of these and the handlers of the
node it is posted to (the engine host's, `spectui.ui.engine_host`, for a load or a pull; the chat
pane's for a reply), on the UI thread, update the screen. `post_message` is thread-safe. None
bubbles: each is handled once, where it was posted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from textual.message import Message

from spectui.engine.events import CycleStats, GenerationStats
from spectui.engine.generation_config import DraftLength, SamplingConfig
from spectui.session.baseline import Calibration
from spectui.session.pair_load import LoadedPair
from spectui.session.reply import ReplyDone, ReplyPiece

ReplyPurpose = Literal["reply", "compare"]
"""`reply`: an answer in the conversation; `compare`: the last prompt re-run with K = 0."""


@dataclass
class LoadProgress(Message, bubble=False):
    """Model loading (or a pull) moved on: `fraction` in 0..1, None when unknown."""

    label: str
    fraction: float | None


@dataclass
class LoadWarning(Message, bubble=False):
    """Something the user should know before or while loading (memory, draft size)."""

    text: str


@dataclass
class GpuUnused(Message, bubble=False):
    """The machine has a GPU this llama.cpp cannot use: the panel's header says so."""

    text: str


@dataclass
class ModelsLoaded(Message, bubble=False):
    """Target and drafters are loaded and checked; a reply can start once the baseline is in."""

    pair: LoadedPair
    """What the loaded pair offers: its drafters, chat format and mode, recommended sampling,
    whether the draft is the target's own model (read from their GGUF metadata in the worker)."""


@dataclass
class BaselineMeasured(Message, bubble=False):
    """The calibration after load finished (its baseline is None when it was cancelled)."""

    calibration: Calibration


@dataclass
class EngineFailed(Message, bubble=False):
    """A load or a pull failed (a `SpectuiError`: missing file, incompatible pair…, or a bug):
    one line for the user. Posted to the engine host."""

    text: str
    during: Literal["load", "pull"]
    reload: bool = False
    """Loading the same models again may work once the cause is gone (a worker back, a file
    restored): the app's next message does it."""


@dataclass
class ReplyFailed(Message, bubble=False):
    """A reply failed (a `SpectuiError`: a bad grammar, a lost worker…, or a bug): one line for
    the user. Posted to the chat pane after the reply's last pieces."""

    text: str
    reload: bool = False
    """As `EngineFailed.reload`."""


@dataclass
class ReplyBatch(Message, bubble=False):
    """A batch of the reply core's pieces and the engine's finished cycles, posted to the chat pane
    a few times a second (`worker_reports.ReplyBatcher`); the last step of a reply's text from the
    engine's `TextPiece` through the session's `ReplyPiece` (docs/ARCHITECTURE.md)."""

    purpose: ReplyPurpose
    pieces: tuple[ReplyPiece, ...]
    """In order: answer or thinking, each with its origin (`target` or the drafter whose proposal
    was accepted)."""
    cycles: tuple[CycleStats, ...]
    totals: GenerationStats | None


@dataclass
class ReplyFinished(Message, bubble=False):
    purpose: ReplyPurpose
    finished: ReplyDone
    """The reply core's last event: the text, the reasoning and the figures."""
    speculation_off: bool
    """True when every cycle ran with K = 0: the reply's speed is a fresh baseline."""

    @property
    def sampling(self) -> SamplingConfig:
        """How its tokens were chosen (the seed drawn for it included)."""
        return self.finished.sampling


@dataclass
class PairReady(Message, bubble=False):
    """A pair picked in the app is pulled and checked; load it next."""

    name: str
    target: Path
    draft: Path | None
    """The draft model, an MTP assistant sidecar (`drafter` "mtp"), or an EAGLE-3 / DFlash head."""
    recommended_k: DraftLength | None
    drafter: str = "model"
    """The pair's drafter: `model`, `mtp` (the target's heads, or the sidecar `draft`), `eagle3`
    or `dflash` (`draft` is such a head)."""
