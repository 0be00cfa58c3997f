"""Driving the chat app in tests: the app with its replies recorded (`RecordingApp`) or held at
their first cycles (`GatedApp`), options for the tiny pair, and the waits (`until`, `ready`,
`send`, `held`) and readings (`shown`, `figures_text`, `palette_text`) the UI tests share.

A reply on the tiny models takes milliseconds, so tests that must act *during* a reply hold the
worker thread at its first batch of cycles (`GatedApp`): generation is real, only paused.
Loops wait with generous deadlines to avoid hangs; nothing asserts on speed.
"""

from __future__ import annotations

import asyncio
import functools
import io
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import tiny_gguf
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from spectui.engine.drafters import DrafterSpec
from spectui.session.options import ChatOptions
from spectui.session.reply import ReplyRequest
from spectui.ui.app import SpectuiApp
from spectui.ui.chat_pane import ChatPane
from spectui.ui.chat_view import NoteMessage
from spectui.ui.engine_host import EngineHost
from spectui.ui.messages import ReplyBatch, ReplyFinished

DEADLINE = 60.0
SIZE = (120, 40)


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop (keeps fixtures: pytest reads `__wrapped__`)."""

    @functools.wraps(test)
    def wrapper(*args: object, **kwargs: object) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


class StillMachine:
    """A machine meter that sees no change in other programs' load: the baseline is only re-measured
    when it is old, so the tests that check every cycle's K see no probe (it has its own test)."""

    def others(self) -> None:
        return None


class RecordingPane(ChatPane):
    """Records, in its app's `updates` and `finishes`, the reply messages the reply worker posts
    to the chat pane (handlers of every class in the MRO run: these first)."""

    def on_reply_batch(self, message: ReplyBatch) -> None:
        self.app.updates.append(message)  # type: ignore[attr-defined]

    def on_reply_finished(self, message: ReplyFinished) -> None:
        self.app.finishes.append(message)  # type: ignore[attr-defined]


class RecordingApp(SpectuiApp):
    """Records the reply messages the workers post (through its `RecordingPane`)."""

    pane_class = RecordingPane

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.updates: list[ReplyBatch] = []
        self.finishes: list[ReplyFinished] = []
        self.engine.update_interval = 0.0
        self.pair.load_meter = StillMachine()  # type: ignore[assignment]


class GatedPane(RecordingPane):
    """Holds the generation thread after its first batch of finished cycles until `gate` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.held = threading.Event()

    def post_message(self, message: object) -> bool:
        posted = super().post_message(message)  # type: ignore[arg-type]
        if isinstance(message, ReplyBatch) and message.cycles and not self.gate.is_set():
            self.held.set()
            self.gate.wait(DEADLINE)
        return posted


class GatedApp(RecordingApp):
    """Holds the generation thread after its first batch of finished cycles until `release`
    (its `GatedPane`, where the reply worker posts)."""

    pane_class = GatedPane

    @property
    def gate(self) -> threading.Event:
        return self.chat_pane.gate  # type: ignore[attr-defined, no-any-return]

    @property
    def held(self) -> threading.Event:
        return self.chat_pane.held  # type: ignore[attr-defined, no-any-return]

    def release(self) -> None:
        self.gate.set()


def options(pair: tiny_gguf.TinyPair, **overrides: object) -> ChatOptions:
    values: dict[str, object] = dict(
        pair_name="tiny", target=pair.target, drafter=DrafterSpec(draft=pair.draft), k=4, max_tokens=24,
        n_ctx=1024, threads=1, calibration_tokens=8, temperature=0.0,  # greedy: replies the tests can predict
    )
    values.update(overrides)
    return ChatOptions(**values)  # type: ignore[arg-type]


async def until(pilot: Pilot, condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


async def ready(pilot: Pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: app.pair.ready, "the models to load and the baseline to be measured")


async def send(pilot: Pilot, text: str, wait: bool = True) -> None:
    app = pilot.app
    finished_before = len(app.finishes)
    app.prompt.load_text(text)
    await pilot.press("enter")
    if wait:
        await until(pilot, lambda: len(app.finishes) > finished_before and app.replies.busy is None,
                    "the reply to finish")


async def held(pilot: Pilot) -> None:
    app = pilot.app
    await until(pilot, app.held.is_set, "the first cycles of the reply")


def shown(widget: Static) -> str:
    """The text a Static displays (its content rendered as plain text)."""
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text().strip()


def figures_text(app: SpectuiApp) -> str:
    return shown(app.query_one("#figures", Static))


def palette_text(app: SpectuiApp) -> str:
    from textual.command import CommandList

    found = app.screen.query(CommandList)
    if not found:
        return ""
    commands = found.first()
    return " ".join(str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count))


class ConfigHost(EngineHost):
    """Records the request of each reply (what the reply core was asked for)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[ReplyRequest] = []

    def generate_reply(self, request: ReplyRequest, purpose: Any) -> Any:
        self.requests.append(request)
        return super().generate_reply(request, purpose)


class ConfigApp(RecordingApp):
    """Also records the request of each reply (its engine host's `requests`)."""

    engine_class = ConfigHost

    @property
    def requests(self) -> list[ReplyRequest]:
        return self.engine.requests  # type: ignore[attr-defined, no-any-return]


def notes(app: RecordingApp, kind: str = "") -> str:
    """The notes in the log, each on one line (however the log wraps them)."""
    return " | ".join(" ".join(shown(n).split()) for n in app.query(NoteMessage) if not kind or n.has_class(kind))


def toasts(app: RecordingApp) -> str:
    return " | ".join(str(n.message) for n in app._notifications)
