"""The UI thread makes no engine call (#28): every llama.cpp call, metadata read, file check, RPC
poll and close runs in a worker thread, whatever the user does.

`EngineCallGuard` (tests/thread_guard.py) records any engine call made on the thread that runs
the app; the chat is driven through everything that reaches the engine: load (and the baseline),
a reply, a regenerate, a settings change and another reply (the health check before a message),
quitting while idle (the models are freed), resuming the chat, and quitting mid-reply (the reply
is still saved, marked interrupted).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import tiny_gguf
from chat_stores import saved_reply
from textual.widgets import Input
from thread_guard import EngineCallGuard
from ui_harness import SIZE, GatedApp, RecordingApp, held, options, ready, run_async, send, until

from spectui.ui.chat_view import AssistantMessage, UserMessage
from spectui.ui.settings_screen import SettingsScreen


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return tiny_pair


@run_async
async def test_no_engine_call_runs_on_the_ui_thread(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = EngineCallGuard().install(monkeypatch)
    app = RecordingApp(options(pair, k=2, max_tokens=16))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Tell me about gears.")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: len(app.finishes) == 2 and app.replies.busy is None, "the regenerated reply")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings screen")
        app.screen.query_one("#temperature", Input).value = "0.5"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, SettingsScreen), "the settings to close")
        await send(pilot, "And chains?")
        await pilot.press("ctrl+q")
    assert app.pair.session.generator is None  # the quit freed the models (off the UI thread)
    resumed = GatedApp(options(pair, resume=True, k=2, max_tokens=4000, n_ctx=4096))
    async with resumed.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert len(resumed.query(UserMessage)) == 2
        await send(pilot, "Write a long story.", wait=False)
        await held(pilot)
        on_screen = resumed.query(AssistantMessage)[-1].text
        threading.Timer(0.3, resumed.release).start()  # the thread resumes while the app quits
        await pilot.press("ctrl+q")
    assert resumed.pair.session.generator is None
    content, complete, stats = saved_reply()
    assert not complete and stats.get("reason") == "interrupted" and on_screen and content.startswith(on_screen)
    assert guard.calls_off_ui > 100  # the guard saw the engine at work (in the workers)
    assert not guard.violations, guard.report()


def test_the_guard_catches_an_engine_call_on_its_thread(pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard is not blind: a metadata read on the test's own thread is recorded, one in a
    worker thread is not."""
    from spectui.engine.model.llama_model import LlamaModel

    guard = EngineCallGuard().install(monkeypatch)
    with LlamaModel.load(pair.target, n_ctx=64) as model:
        off = threading.Thread(target=model.meta, args=("general.architecture",))
        off.start()
        off.join()
        seen = len(guard.violations)
        model.meta("general.architecture")
    assert "ModelVocabulary.meta on the UI thread" in guard.violations[seen]
    assert guard.calls_off_ui >= 2  # meta, and llama_model_meta_val_str inside it
