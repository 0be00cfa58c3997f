"""The app's state, grouped by the one part of the app that writes each piece, on the UI thread.

`app.pair` (PairState) is held by the `EngineHost` widget (`#engine`, `engine_host.py`), which
runs the `EngineSession`'s methods in its workers; `app.quit_state` (QuitState) by the app's
`Lifecycle` (`lifecycle.py`); `app.chat` (ChatState) and `app.replies` (ReplyState) by the chat
column (`ChatColumn`, `ReplyFlow`, `ChatPane`: one widget, `#chat-column`), which draws them, runs
the reply flow and holds the chat's keys, whose actions call its methods. Other parts read them;
no worker thread writes any (`tests/test_ui_owners.py`). The status line's text is the
`StatusLine` widget's own, the panel's figures the `StatsPanel`'s (`PanelState`).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.engine.drafters.spec import DrafterInfo
from spectui.engine.generation_config import DraftControl, RecommendedSampling
from spectui.session.baseline import Baseline
from spectui.session.loaded import EngineSession
from spectui.session.machine import LoadMeter
from spectui.session.options import ChatOptions
from spectui.ui.messages import ReplyPurpose

if TYPE_CHECKING:
    from spectui.ui.chat_view import AssistantMessage, Comparison, UserMessage
    from spectui.ui.worker_reports import ReplyBatcher


@dataclass
class PairState:
    """The pair of models: which one, loading or loaded, and what it offers. Owned by `EngineHost`
    (`engine_host.py`): its workers, loading handlers and the speculation keys write it; the other
    parts read it through `app.pair` and change it only through the host's methods."""

    options: ChatOptions
    """The run's options with the pair loaded or loading (a picked pair, or `--resume`'s, replaces them)."""
    draft_control: DraftControl
    """K, speculation on/off and the drafter, shared with the reply thread's loop (read each
    cycle); the keys change it in place through the engine host's methods, a new pair replaces it."""
    session: EngineSession = field(default_factory=EngineSession)
    """The one owner of the loaded models; only the workers call its methods (the UI thread reads
    `chat_format`)."""
    drafters: DrafterInfo = field(default_factory=DrafterInfo)
    """What the loaded generator offers (empty until the models are loaded)."""
    recommended_sampling: RecommendedSampling | None = None
    """Where the chat's sampling starts with the loaded models (None until they load)."""
    draft_same_model: bool = False
    """The draft is the target's model at another precision (changes the low-acceptance advice)."""
    loaded_mode: str = ""
    """The loaded model's own mode (from its template and `--mode`): a new chat's."""
    ready: bool = False
    """Loaded and the baseline measured: a message can be sent."""
    load_failed: bool = False
    """The last load failed: no model is loaded."""
    reload_pending: bool = False
    """A fault left the models unusable: the next message loads them again first
    (`lifecycle.reload_first` and a reply's fault set it through `EngineHost.set_reload_pending`)."""
    removed_noted: set[str] = field(default_factory=set)
    """Loaded model files already said to be gone from disk (`EngineHost.newly_removed`)."""
    baseline: Baseline | None = None
    """Speculation-off speed with these models (measured after load, refreshed by replies that
    measure it); None until measured and after an unload."""
    load_meter: LoadMeter = field(default_factory=LoadMeter)
    """Other programs' CPU use, to tell when the baseline no longer compares."""


@dataclass
class ChatState:
    """The chat on screen and the store it is saved in. Written by the chat column alone (it draws
    a stored chat and adds turns; its keys' actions open, resume, set up and start chats and switch
    the colours through its methods)."""

    store: SafeStore
    """The chats' SQLite store (UI thread only: the load worker gets the history read here)."""
    conversation: Conversation
    """The chat shown: its turns, settings and system prompt, saved as they change."""
    mode: str = ""
    """How prompts are made for this chat with the loaded model: `chat`, `completion` or `plain-chat`."""
    colouring: bool = False
    """Replies coloured by who proposed each token (F6)."""
    export_dir: Path | None = None
    """Where the app writes exports (None: the current directory)."""


@dataclass
class ReplyState:
    """The reply (or side-by-side re-run) in progress and the messages waiting for one. Written by
    the chat column alone, which runs the reply flow (the keys start a comparison and stop a reply
    through its methods)."""

    busy: ReplyPurpose | None = None
    """What is generating now (`reply` or `compare`); None when idle."""
    stop_requested: threading.Event = field(default_factory=threading.Event)
    """Set to stop the running reply at its next cycle (Escape, a quit, a new chat)."""
    reply_widget: AssistantMessage | None = None
    """The reply being streamed into (None when idle)."""
    comparison: Comparison | None = None
    """The last side-by-side re-run (F5), its right side streamed into while `busy == "compare"`."""
    last_cycle_k: int | None = None
    """K of the last cycle seen (what K=auto chose), for the panel's K label."""
    after_idle: Callable[[], Awaitable[None]] | None = None
    """What runs once the reply being stopped has ended (a new chat, a chat opened)."""
    queued: UserMessage | None = None
    """A message typed while the models load, sent once they are ready."""
    editing: int | None = None
    """The turn being edited in the message box (Enter resends it in its place)."""
    batcher: ReplyBatcher | None = None
    """The reply thread's batcher (what a quit saves when the screen cannot follow): made by the
    engine host on the UI thread as the reply starts, kept here by the pane."""


@dataclass
class QuitState:
    """How the app ends. Owned by `lifecycle.py` (the crash line by the app's exception hook)."""

    quitting: int | None = None
    """The exit code once a quit was asked for (the reply in progress is being saved)."""
    quit_line: str | None = None
    """What `spectui chat` says when the app ended on a signal."""
    crash_line: str | None = None
    """Set when an unexpected exception ended the app: the one line `spectui chat` prints."""
    watchdog: threading.Timer | None = None
    """Ends the process if the exit after a signal hangs (cancelled when the app unmounts)."""
