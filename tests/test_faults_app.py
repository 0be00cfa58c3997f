"""The chat app when something breaks under it, and when it is told to quit mid-reply (Pilot, the
tiny real models, real `spectui worker` processes).

A fault (a worker killed mid-reply or between replies, a model file truncated, rewritten or
removed) ends in one line in the chat, keeps what the reply had written, never crashes or hangs
the app, and the next message loads the pair again once the cause is gone. Quitting mid-reply by
any road (Ctrl+Q, Ctrl+C, SIGTERM, SIGHUP, SIGINT) saves the whole reply, marked interrupted.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
from pathlib import Path

import pytest
import tiny_gguf
from chat_stores import saved_reply
from fault_points import SEED, Plan, install, kill_worker
from rpc_workers import start_worker
from ui_harness import SIZE, GatedApp, RecordingApp, options, ready, run_async, send, shown, until

from spectui.chat.conversation import Conversation
from spectui.chat.store import ChatStore
from spectui.engine import rpc
from spectui.paths import chats_db_path
from spectui.ui.chat_view import AssistantMessage, NoteMessage
from spectui.ui.run import report_exit
from spectui.worker import spawn

needs_rpc = pytest.mark.skipif(not rpc.rpc_available(), reason="llama-cpp-python built without GGML_RPC")


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, tmp_path: Path, spectui_home: Path) -> tiny_gguf.TinyPair:
    """A copy of the tiny pair this test may cut."""
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    shutil.copy(tiny_pair.target, target)
    shutil.copy(tiny_pair.draft, draft)
    return tiny_gguf.TinyPair(target, draft)


def notes(app: RecordingApp, kind: str = "") -> list[str]:
    return [shown(n) for n in app.query(NoteMessage) if not kind or n.has_class(kind)]


def greedy_reply(pair: tiny_gguf.TinyPair, text: str, max_tokens: int) -> str:
    """What the target alone writes to `text` as the app's first message (the truth a cut reply
    must be a prefix of)."""
    from spectui.chat.template import ChatFormat, ChatMessage
    from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
    from spectui.engine.generator import load_generator

    gen = load_generator(pair.target, None, n_ctx=1024, n_threads=1)
    try:
        fmt = ChatFormat.from_model(gen.target)
        prompt = fmt.prompt_tokens(gen.target, [ChatMessage("user", text)])
        config = GenerationConfig(max_tokens=max_tokens, stop=fmt.stop_strings, sampling=SamplingConfig())
        return list(gen.generate(prompt, config, DraftControl(0)))[-1].text
    finally:
        gen.close()


# ----- quitting mid-reply saves the whole reply, marked interrupted ---------------------------------


async def quit_mid_reply(app: GatedApp, pilot, how: str) -> str:
    """Start a reply, hold it after its first cycles, quit `how`; return what was on screen."""
    await send(pilot, "Tell me a long story", wait=False)
    await until(pilot, lambda: app.held.is_set(), "the reply to start streaming")
    await pilot.pause()
    on_screen = app.query(AssistantMessage)[-1].text
    if how in ("ctrl+q", "ctrl+c"):
        app.prompt.focus()
        await pilot.press(how)
    else:
        os.kill(os.getpid(), getattr(signal, how))
    await pilot.pause()
    app.release()  # the reply thread goes on to its next cycle, sees the stop, hands over the rest
    await until(pilot, lambda: app._exit, "the app to quit")
    return on_screen


@pytest.mark.parametrize("how", ["ctrl+q", "ctrl+c", "SIGTERM", "SIGHUP", "SIGINT"])
@run_async
async def test_quitting_mid_reply_saves_everything_streamed_marked_interrupted(pair, how, monkeypatch) -> None:
    from spectui import signals

    app = GatedApp(options(pair, max_tokens=400))
    # SIGHUP ends the process once the reply is saved (the terminal is gone: test_faults_terminal.py
    # closes a real one); here it ends the app instead, so that the test can look at what was saved.
    monkeypatch.setattr(signals, "exit_now", lambda line, code: app.exit(return_code=code))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        on_screen = await quit_mid_reply(app, pilot, how)
    content, complete, stats = saved_reply()
    assert not complete and stats.get("reason") == "interrupted"
    assert on_screen and content.startswith(on_screen)  # all that was shown, and what came after
    finished = app.finishes[-1].finished if app.finishes else None
    if how != "SIGHUP":  # (after a hangup the screen is not updated any more: no finish is shown)
        assert finished is not None and finished.reason == "cancelled"
        assert content == finished.text and len(finished.tokens) < 400  # every token generated
    assert content == greedy_reply(pair, "Tell me a long story", 400)[: len(content)]
    code = report_exit(app)
    if how.startswith("SIG"):
        number = getattr(signal, how)
        assert code == 128 + number
        assert app.quit_state.quit_line is not None and "the reply in progress was saved" in app.quit_state.quit_line
    else:
        assert code == 0
    resumed = RecordingApp(options(pair, resume=True))
    async with resumed.run_test(size=SIZE) as pilot:
        await ready(pilot)
        reply = resumed.query(AssistantMessage)[-1]
        assert reply.text == content and reply.meta == "interrupted (saved before it finished)"


@run_async
async def test_ctrl_c_copies_a_selection_instead_of_quitting(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        app.prompt.load_text("keep this")
        app.prompt.select_all()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not app._exit and app.clipboard == "keep this"
        await pilot.press("ctrl+q")
        await until(pilot, lambda: app._exit, "the app to quit")


@run_async
async def test_a_reply_that_does_not_stop_is_saved_as_shown_and_the_app_quits_anyway(pair, monkeypatch) -> None:
    from spectui.ui import lifecycle

    monkeypatch.setattr(lifecycle, "QUIT_WAIT", 0.3)
    app = GatedApp(options(pair, max_tokens=400))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Tell me a long story", wait=False)
        await until(pilot, lambda: app.held.is_set(), "the reply to start streaming")
        await pilot.pause()
        on_screen = app.query(AssistantMessage)[-1].text
        await pilot.press("ctrl+q")  # the reply thread stays held: it cannot hand anything over
        await until(pilot, lambda: app._exit, "the app to quit without the reply")
        content, complete, _ = saved_reply()
        assert not complete and content == on_screen and content
        app.release()


# ----- a worker lost ----------------------------------------------------------------------------------


async def lose_worker_mid_reply(pilot, worker) -> None:
    port = int(worker.endpoint.rsplit(":", 1)[1])
    at = random.Random(f"{SEED}-app-worker").randint(2, 8)
    with pytest.MonkeyPatch.context() as patch:  # undone after this reply (the home stays patched)
        install(Plan("speculative", "kill-worker", at=at, worker_pid=worker.process.pid, worker_port=port),
                patch.setattr)
        await send(pilot, "Tell me a long story")


@needs_rpc
@run_async
async def test_a_worker_killed_mid_reply_keeps_the_reply_and_the_next_message_reconnects(pair) -> None:
    worker = start_worker()
    port = int(worker.endpoint.rsplit(":", 1)[1])
    back = None
    app = RecordingApp(options(pair, rpc=worker.endpoint, max_tokens=60))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await lose_worker_mid_reply(pilot, worker)
            finished = app.finishes[-1].finished
            assert finished.reason == "worker" and 0 < len(finished.tokens) < 60
            reply = app.query(AssistantMessage)[-1]
            assert reply.text == finished.text and "cut: a worker was lost" in reply.meta
            line = notes(app, "error")[-1]
            assert line.startswith(f"worker {worker.endpoint} stopped answering (")  # closed, or a failed send
            assert line.endswith("): start the worker again; your next message loads the pair again")
            assert finished.text == greedy_reply(pair, "Tell me a long story", 60)[: len(finished.text)]
            content, complete, _ = saved_reply()
            assert complete and content == finished.text  # kept, in the chat and on disk

            # not back yet: the reload says so in one line and gives the message back
            await send(pilot, "Are you there?", wait=False)
            await until(pilot, lambda: app.pair.load_failed, "the reload to fail")
            assert f"worker 127.0.0.1:{port} refused the connection" in notes(app, "error")[-1]
            assert app.prompt.text == "Are you there?"

            back = spawn("127.0.0.1", port, threads=1)  # the worker is back: Enter again
            await pilot.press("enter")
            await until(pilot, lambda: len(app.finishes) == 2, "the reply over the new worker")
            assert any("loading" in n and "again" in n for n in notes(app))
            assert app.finishes[-1].finished.reason == "length"
            assert app.pair.session.generator.target.rpc is not None
    finally:
        worker.stop()
        if back is not None:
            back.stop()
    assert app.quit_state.crash_line is None


@needs_rpc
@run_async
async def test_a_worker_that_died_and_came_back_between_replies_is_reconnected_by_the_next_message(pair) -> None:
    worker = start_worker()
    port = int(worker.endpoint.rsplit(":", 1)[1])
    back = None
    app = RecordingApp(options(pair, rpc=worker.endpoint))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Hello")
            kill_worker(worker.process.pid, port)
            back = spawn("127.0.0.1", port, threads=1)
            await send(pilot, "Still there?")  # one message: noticed, reloaded, answered
            assert [f.finished.reason for f in app.finishes] == ["length", "length"]
            warning = next(n for n in notes(app, "warning") if "stopped answering" in n)
            assert warning.endswith("your next message loads the pair again")
            assert [m.text for m in app.query(AssistantMessage)] == [f.finished.text for f in app.finishes]
            assert not notes(app, "error")
    finally:
        worker.stop()
        if back is not None:
            back.stop()


@needs_rpc
@run_async
async def test_a_worker_killed_while_the_pair_loads_is_one_line_and_the_next_message_retries(pair) -> None:
    worker = start_worker()
    port = int(worker.endpoint.rsplit(":", 1)[1])
    back = None
    patch = pytest.MonkeyPatch()
    install(Plan("load", "kill-worker", at=random.Random(f"{SEED}-app-load").randint(3, 8),
                 worker_pid=worker.process.pid, worker_port=port), patch.setattr)
    app = RecordingApp(options(pair, rpc=worker.endpoint))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.pair.load_failed, "the load to fail")
            patch.undo()
            line = notes(app, "error")[-1]
            assert f"worker {worker.endpoint} stopped answering" in line and "\n" not in line
            assert line.endswith("your next message loads the pair again")
            back = spawn("127.0.0.1", port, threads=1)
            await send(pilot, "Hello")
            assert app.finishes[-1].finished.reason == "length"
    finally:
        patch.undo()
        worker.stop()
        if back is not None:
            back.stop()


# ----- a model file changed under the loaded pair -----------------------------------------------------


@pytest.mark.parametrize("action", ["truncate", "rewrite"])
@run_async
async def test_a_model_file_changed_mid_reply_ends_it_in_one_line_keeping_the_text(pair, action) -> None:
    app = RecordingApp(options(pair, max_tokens=60))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        at = random.Random(f"{SEED}-app-{action}").randint(2, 8)
        with pytest.MonkeyPatch.context() as patch:
            install(Plan("speculative", action, at=at, file=str(pair.target)), patch.setattr)
            await send(pilot, "Tell me a long story")
        finished = app.finishes[-1].finished
        assert finished.reason == "file" and 0 < len(finished.tokens) < 60
        how = "truncated" if action == "truncate" else "rewritten"
        line = notes(app, "error")[-1]
        assert line.startswith(f"target.gguf was {how} on disk after it was loaded")
        assert line.endswith("put the file back (or pull the pair again); your next message loads the pair again")
        assert app.query(AssistantMessage)[-1].text == finished.text
        assert saved_reply()[0] == finished.text
    assert app.quit_state.crash_line is None


@run_async
async def test_a_model_file_truncated_between_replies_is_said_and_loads_again_once_restored(
        pair, tiny_pair, tmp_path) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
        os.truncate(pair.target, pair.target.stat().st_size // 3)
        await send(pilot, "Again", wait=False)
        await until(pilot, lambda: app.pair.load_failed, "the reload to fail on the cut file")
        warning = next(n for n in notes(app, "warning") if "truncated" in n)
        assert warning.startswith("target.gguf was truncated on disk after it was loaded")
        assert "target.gguf" in notes(app, "error")[-1] and app.prompt.text == "Again"
        assert len(app.finishes) == 1  # nothing was generated from a cut file
        shutil.copy(tiny_pair.target, pair.target)  # put back
        await pilot.press("enter")
        await until(pilot, lambda: len(app.finishes) == 2, "the reply once the file is back")
        assert app.finishes[-1].finished.reason == "length"
    assert app.quit_state.crash_line is None


@run_async
async def test_a_model_file_removed_while_loaded_is_said_once_and_the_chat_goes_on(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        os.remove(pair.draft)
        await send(pilot, "Hello")
        await send(pilot, "Again")
        warnings = [n for n in notes(app, "warning") if "removed" in n]
        assert warnings == ["draft.gguf was removed from disk after it was loaded: this chat goes on with the loaded "
                            "copy, but loading the pair again will not find it"]
        assert [f.finished.reason for f in app.finishes] == ["length", "length"]
        assert all(f.finished.stats.drafted > 0 for f in app.finishes)  # the draft still drafts


def test_the_sigbus_handler_saves_the_reply_on_screen_and_names_the_file(pair, monkeypatch) -> None:
    """What the app does on a SIGBUS (a real one is tested end to end in test_faults_terminal.py):
    the reply on screen is saved, interrupted, and the line names the truncated file."""
    import asyncio

    from spectui import signals

    ended: list[tuple[str, int]] = []

    def record(line: str, code: int) -> None:
        ended.append((line, code))
        raise SystemExit(code)

    monkeypatch.setattr(signals, "exit_now", record)

    async def scenario() -> None:
        app = GatedApp(options(pair, max_tokens=400))
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "Tell me a long story", wait=False)
            await until(pilot, lambda: app.held.is_set(), "the reply to start streaming")
            await pilot.pause()
            on_screen = app.query(AssistantMessage)[-1].text
            os.truncate(pair.target, 1000)
            with pytest.raises(SystemExit), signals.on_bus_error(app.on_bus_error):
                on_bus = signal.getsignal(signal.SIGBUS)
                on_bus(signal.SIGBUS, None)  # as the main thread would run it
            content, complete, stats = saved_reply()
            assert content.startswith(on_screen) and on_screen  # and what was on its way
            assert (complete, stats.get("reason")) == (False, "interrupted")
            app.replies.stop_requested.set()  # the held thread must not read the cut weights: it stops at once
            app.release()

    asyncio.run(scenario())
    [(line, code)] = ended
    assert code == 1
    assert line.startswith("target.gguf was truncated on disk after it was loaded")
    assert line.endswith("put the file back (or pull the pair again), then run the command again")


def test_interrupted_replies_reopen_as_interrupted(spectui_home) -> None:
    store = ChatStore(chats_db_path())
    chat = Conversation(store, "tiny")
    chat.add_user("Hi")
    chat.start_reply()
    assert chat.save_interrupted("Hel", stats={"reason": "interrupted"})
    assert chat.save_interrupted("Hello th")  # more arrived: written again
    reopened = Conversation.open(store, chat.chat_id)
    assert reopened.messages[-1].content == "Hello th" and reopened.interrupted(1)
    store.close()
