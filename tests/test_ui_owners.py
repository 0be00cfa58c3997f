"""The app's chat and reply state each have one writer, on the UI thread (#37): `ChatState` and
`ReplyState` are assigned only by the chat column (`ChatColumn`, `ChatPane`), whatever the keys
do, and never by a worker thread (the reply worker posts messages; its batcher is made on the UI
thread)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import tiny_gguf
from ui_harness import SIZE, RecordingApp, options, ready, run_async, send, until

from spectui.ui.state import ChatState, ReplyState

WRITERS = {"spectui.ui.chat_column", "spectui.ui.reply_flow", "spectui.ui.state"}
"""Where an assignment may come from (`spectui.ui.state`: the dataclasses' own `__init__`)."""


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return tiny_pair


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, bool]]:
    """Every assignment to a ChatState or ReplyState field: (field, writing module, on a thread
    other than the one that set the recorder up)."""
    ui_thread = threading.get_ident()
    seen: list[tuple[str, str, bool]] = []

    def recording(self: object, name: str, value: Any) -> None:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        seen.append((f"{type(self).__name__}.{name}", caller, threading.get_ident() != ui_thread))
        object.__setattr__(self, name, value)

    for cls in (ChatState, ReplyState):
        monkeypatch.setattr(cls, "__setattr__", recording)
    return seen


@run_async
async def test_chat_and_reply_state_are_written_by_the_chat_column_alone(pair, writes) -> None:
    app = RecordingApp(options(pair, k=2, max_tokens=12))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Tell me about gears.")
        await pilot.press("f6")  # colours
        await pilot.press("f5")  # the side-by-side re-run
        await until(pilot, lambda: len(app.finishes) == 2 and app.replies.busy is None, "the comparison")
        await pilot.press("ctrl+r")  # regenerate
        await until(pilot, lambda: len(app.finishes) == 3 and app.replies.busy is None, "the regenerated reply")
        await pilot.press("ctrl+n")  # a new chat
        await send(pilot, "And chains?")
    fields = {field for field, _module, _thread in writes}
    assert {"ReplyState.batcher", "ReplyState.comparison", "ChatState.colouring", "ChatState.conversation",
            "ChatState.mode", "ReplyState.busy"} <= fields  # the flow above wrote them all
    assert [w for w in writes if w[2]] == []  # no worker thread wrote any
    assert [w for w in writes if w[1] not in WRITERS] == []
