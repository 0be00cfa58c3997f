"""The chat app driven through Textual's Pilot on the tiny real models (llama.cpp, no fakes).

A reply on the tiny models takes milliseconds, so tests that must act *during* a reply hold the
worker thread at its first batch of cycles (`GatedApp`): generation is real, only paused.
Loops wait with generous deadlines to avoid hangs; nothing asserts on speed.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import tiny_gguf
from textual.widgets import OptionList, Static
from ui_harness import (
    SIZE,
    GatedApp,
    RecordingApp,
    figures_text,
    held,
    options,
    palette_text,
    ready,
    run_async,
    send,
    shown,
    until,
)

from spectui.chat.store import ChatStore
from spectui.chat.template import ChatMessage
from spectui.engine.drafters import DrafterSpec
from spectui.paths import chats_db_path
from spectui.ui.chat_view import AssistantMessage, Comparison, NoteMessage, UserMessage
from spectui.ui.chat_view import shown as on_screen
from spectui.ui.examples import EXAMPLES, ExampleOpenings
from spectui.ui.screens import ChatsScreen


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return tiny_pair


@run_async
async def test_reply_streams_and_panel_shows_acceptance_and_baseline(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.pair.baseline is not None and app.pair.baseline.tokens_per_second > 0
        assert app.pair.baseline.source == "calibration after load"
        await send(pilot, "Tell me about gears.")
        [finished] = app.finishes
        streamed = "".join(piece.text for update in app.updates for piece in update.pieces)
        assert len([u for u in app.updates if u.pieces]) > 1  # many pieces, not one final dump
        assert streamed == finished.finished.text != ""
        reply = app.query_one(AssistantMessage)
        assert reply.text == streamed
        totals = app.panel.state.totals
        assert totals is not None and totals.drafted > 0 and 0 < totals.acceptance_rate <= 1
        assert f"{totals.acceptance_rate:.0%}" in figures_text(app)
        assert "tok/s" in figures_text(app) and "x" in figures_text(app)  # speed and speedup shown
        note = shown(app.query_one("#baseline-note", Static))
        assert note.startswith("baseline: ") and "K=0, calibration after load" in note
        assert app.query_one("#accept-spark").data  # one acceptance value per drafted cycle
    store = ChatStore(chats_db_path())
    chat = store.last_chat_id()
    assert chat is not None
    saved = [(m.role, m.content, m.complete) for m in store.messages(chat)]
    assert saved == [("user", "Tell me about gears.", True), ("assistant", streamed, True)]


@run_async
async def test_k_keys_change_k_from_the_next_cycle_of_a_running_reply(pair) -> None:
    app = GatedApp(options(pair, k=2, max_tokens=64))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Count to ten.", wait=False)
        await held(pilot)
        cycles_before = sum(len(u.cycles) for u in app.updates)
        await pilot.press("f3", "f3")
        assert app.pair.draft_control.k == 4
        assert "4" in figures_text(app)
        app.release()
        await until(pilot, lambda: app.replies.busy is None, "the reply to finish")
        ks = [c.k for u in app.updates for c in u.cycles]
        assert set(ks[:cycles_before]) == {2}
        assert ks[cycles_before] == 4  # the very next cycle used the new K
        await pilot.press("f2")
        assert app.pair.draft_control.k == 3


@run_async
async def test_a_streaming_reply_shows_no_animated_bar_and_paces_its_updates(pair) -> None:
    """An indeterminate bar redraws ~15 times a second beside the model's threads: a reply says
    "generating…" and streams, with no bar; its batches come at the pace (not every event)."""
    from textual.widgets import ProgressBar

    app = GatedApp(options(pair, k=2, max_tokens=64))
    app.engine.update_interval = 0.1
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Count to ten.", wait=False)
        await held(pilot)
        assert "generating" in shown(app.query_one("#status", Static))
        assert not app.query_one("#load-progress", ProgressBar).display
        batcher = app.replies.batcher
        assert batcher is not None and batcher.pace is app.engine.pace
        app.release()
        await until(pilot, lambda: app.replies.busy is None, "the reply to finish")
        assert "ready" in shown(app.query_one("#status", Static))


@run_async
async def test_a_stale_baseline_is_measured_again_by_a_probe_at_the_start_of_the_next_reply(pair) -> None:
    from dataclasses import replace
    from datetime import timedelta

    from spectui.session.baseline import PROBE_TOKENS

    app = RecordingApp(options(pair, max_tokens=48))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        old = app.pair.baseline
        app.pair.baseline = replace(old, measured_at=old.measured_at - timedelta(minutes=30))
        assert "30 min ago" in app.pair.baseline.describe()
        await send(pilot, "Count to ten.")
        cycles = [c for u in app.updates for c in u.cycles]
        probes = [c for c in cycles if c.probe]
        assert len(probes) == PROBE_TOKENS and cycles[:PROBE_TOKENS] == probes
        assert all(c.k == 0 and c.drafted == 0 for c in probes) and any(c.drafted for c in cycles[PROBE_TOKENS:])
        assert app.pair.baseline.source == "probe at this reply's start" and app.pair.baseline.tokens == PROBE_TOKENS
        assert "(just now)" in app.pair.baseline.describe()
        totals = app.panel.state.totals
        assert totals.probe_tokens == PROBE_TOKENS
        assert totals.decode_tokens == totals.generated_tokens - 1 - PROBE_TOKENS


@run_async
async def test_speculation_toggle_runs_a_reply_with_k0_and_refreshes_the_baseline(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        calibration = app.pair.baseline
        await pilot.press("f4")
        assert not app.pair.draft_control.enabled
        assert "off (K=4 when on)" in figures_text(app)
        await send(pilot, "Hello")
        cycles = [c for u in app.updates for c in u.cycles]
        assert cycles and all(c.k == 0 and c.drafted == 0 for c in cycles)
        assert app.finishes[-1].speculation_off
        assert app.pair.baseline is not calibration
        assert app.pair.baseline.source == "reply with speculation off"
        await pilot.press("f4")
        assert app.pair.draft_control.enabled and app.pair.draft_control.effective_k() == 4


@run_async
async def test_escape_stops_a_long_reply(pair) -> None:
    app = GatedApp(options(pair, max_tokens=4000, n_ctx=4096))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Write a long story.", wait=False)
        await held(pilot)
        await pilot.press("escape")
        app.release()
        await until(pilot, lambda: app.replies.busy is None, "the stopped reply to end")
        finished = app.finishes[-1].finished
        assert finished.reason == "cancelled"
        assert finished.stats.generated_tokens < 4000
        reply = app.query_one(AssistantMessage)
        assert "stopped" in reply.meta
        await send(pilot, "Still there?")  # the app stays usable
        assert app.finishes[-1].finished.reason != "cancelled"


@run_async
async def test_compare_reruns_the_last_prompt_with_speculation_off(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Name three colours.")
        await pilot.press("f5")
        await until(pilot, lambda: len(app.finishes) == 2 and app.replies.busy is None, "the comparison")
        comparison = app.query_one(Comparison)
        assert comparison.left.text == comparison.right.text != ""  # greedy: lossless
        verdict = shown(comparison.query_one(".verdict", Static))
        assert "identical text" in verdict and "speculation off" in verdict
        assert app.pair.baseline is not None and app.pair.baseline.source == "side-by-side re-run"
        assert len(app.chat.conversation.messages) == 2  # the re-run is not a new turn


@run_async
async def test_token_colouring_marks_accepted_draft_tokens(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
        reply = app.query_one(AssistantMessage)
        assert not reply.has_class("-coloured")
        await pilot.press("f6")
        assert reply.has_class("-coloured")
        coloured = reply.coloured_text()
        green = sum(span.end - span.start for span in coloured.spans if span.style == "green")
        from_draft = sum(len(on_screen(text)) for text, origin in reply.pieces if origin == "model")
        assert green == from_draft > 0  # the tiny model's tokens include controls: shown escaped
        assert coloured.plain == on_screen(reply.text)
        await pilot.press("f6")
        assert not reply.has_class("-coloured")


@run_async
async def test_chat_is_saved_and_resumed(pair) -> None:
    first = RecordingApp(options(pair, system="Be brief."))
    async with first.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Remember the word kiwi.")
        answer = first.query_one(AssistantMessage).text
    second = RecordingApp(options(pair, resume=True))
    async with second.run_test(size=SIZE) as pilot:
        await ready(pilot)
        users = [shown(m) for m in second.query(UserMessage)]
        assert users == ["Remember the word kiwi."]
        assert second.query_one(AssistantMessage).text == answer
        assert second.chat.conversation.system == "Be brief."
        await send(pilot, "Which word?")
        assert len(second.query(AssistantMessage)) == 2
    store = ChatStore(chats_db_path())
    [chat] = store.list_chats()
    assert [m.role for m in store.messages(chat.id)] == ["system", "user", "assistant", "user", "assistant"]


@run_async
async def test_past_chats_can_be_listed_and_opened_and_new_chat_clears(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "First chat")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert not app.query(UserMessage)
        await send(pilot, "Second chat")
        await pilot.press("ctrl+o")
        await until(pilot, lambda: isinstance(app.screen, ChatsScreen), "the chats screen")
        listing = app.screen.query_one(OptionList)
        labels = [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert labels[0].startswith("Second chat") and labels[1].startswith("First chat")
        listing.highlighted = 1
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, ChatsScreen), "the chat to open")
        await pilot.pause()
        assert [shown(m) for m in app.query(UserMessage)] == ["First chat"]


@run_async
async def test_incompatible_pair_is_reported_and_the_app_stays_usable(pair, incompatible_draft) -> None:
    app = RecordingApp(options(pair, drafter=DrafterSpec(draft=incompatible_draft)))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.query(".note-message.error"), "the load error")
        error = shown(app.query_one(".note-message.error", NoteMessage))
        assert "does not share the tokenizer" in error and "token 100" in error
        assert not app.pair.ready
        await send(pilot, "Hello?", wait=False)
        await pilot.pause()
        assert app.replies.busy is None and not app.query(UserMessage)  # refused politely, not crashed
        app.engine.start_loading(options(pair))  # picking a good pair afterwards works
        await ready(pilot)
        await send(pilot, "Hello")
        assert app.finishes


@run_async
async def test_a_base_model_opens_in_completion_mode_with_examples(tmp_path: Path, spectui_home: Path) -> None:
    """No chat template: the header says completion, the hint and examples show, F8 + Enter sends
    the first example, and the prompt the model reads is the text itself (no User/Assistant)."""
    base = tiny_gguf.write_pair(tmp_path, spec=tiny_gguf.TinySpec(chat_template=None))
    app = RecordingApp(options(base))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.sub_title.startswith("completion ·")
        examples = app.query_one(ExampleOpenings)
        assert "base model: it continues your text" in shown(examples.query_one(".examples-hint", Static))
        await pilot.press("f8")
        assert app.focused is not None and app.focused.id == "example-story"
        finished_before = len(app.finishes)
        await pilot.press("enter")
        await until(pilot, lambda: len(app.finishes) > finished_before and app.replies.busy is None, "the continuation")
        assert not app.query(ExampleOpenings)  # gone once the chat has begun
        user = app.query_one(UserMessage)
        assert shown(user).startswith("The lighthouse keeper found the bottle")
        reply = app.query(AssistantMessage).last()
        assert reply.border_title == "continuation"
        prompt = app.pair.session.prompt_tokens(app.chat.conversation.prompt_messages()[:1])
        text = app.pair.session.generator.target.detokenize(prompt)
        assert text == EXAMPLES[0][1] and "User:" not in text


@run_async
async def test_a_chat_model_keeps_its_template_and_shows_no_examples(pair) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.sub_title.startswith("chat ·") and not app.query(ExampleOpenings)
        prompt = app.pair.session.prompt_tokens([ChatMessage("user", "Hi")])
        assert prompt[0] == tiny_gguf.IM_START_ID  # the template's control token, parsed
        assert app.pair.session.generator.target.detokenize(prompt) == "user\nHi\nassistant\n"


@run_async
async def test_a_chat_model_without_template_can_use_the_plain_frame(tmp_path: Path, spectui_home: Path) -> None:
    plain = tiny_gguf.write_pair(tmp_path, spec=tiny_gguf.TinySpec(chat_template=None))
    app = RecordingApp(options(plain, mode="chat"))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        notes = " ".join(shown(n) for n in app.query(NoteMessage))
        assert "no chat template" in notes and app.sub_title.startswith("plain-chat ·")
        await send(pilot, "Hello")
        assert app.finishes[-1].finished.reason in {"eos", "stop", "length"}


@run_async
async def test_pair_picker_lists_pulled_pairs_and_loads_the_chosen_one(pair, tmp_path: Path) -> None:
    from spectui.catalog import pull_adhoc

    other = tiny_gguf.write_pair(tmp_path / "other", seed=99)
    pull_adhoc("tiny-other", str(other.target), str(other.draft))
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"pair tiny-other")
        await until(pilot, lambda: "tiny-other" in palette_text(app), "the pair in the palette")
        assert "pulled" in palette_text(app)
        await pilot.press("enter")
        await until(pilot, lambda: app.pair.options.pair_name == "tiny-other", "the pair switch")
        await ready(pilot)
        assert app.pair.options.target.samefile(other.target)
        await send(pilot, "Hello from the other pair")
        assert app.finishes[-1].finished.text


@run_async
async def test_full_context_is_reported_and_a_new_chat_recovers(pair) -> None:
    app = RecordingApp(options(pair, n_ctx=256))  # llama.cpp rounds n_ctx up to 256s
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "a very long question " * 30)
        assert app.finishes[-1].finished.reason == "context"
        error = " ".join(shown(n) for n in app.query(".note-message.error"))
        assert "context is full" in error and "--ctx" in error
        await pilot.press("ctrl+n")
        await send(pilot, "short")
        assert app.finishes[-1].finished.reason != "context"


@run_async
async def test_quitting_mid_reply_cancels_the_worker_and_frees_the_models(pair) -> None:
    app = GatedApp(options(pair, max_tokens=4000, n_ctx=4096))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Write a long story.", wait=False)
        await held(pilot)
        [worker] = [w for w in app.workers if w.group == "engine" and not w.is_finished]
        threading.Timer(0.3, app.release).start()  # the thread resumes while the app quits
        await pilot.press("ctrl+q")
    assert worker.is_cancelled
    assert app.pair.session.generator is None  # closed once the worker let go of it
    assert app.replies.stop_requested.is_set()


@run_async
async def test_missing_model_file_is_reported_in_the_app(pair, tmp_path: Path) -> None:
    app = RecordingApp(options(pair, target=tmp_path / "nowhere.gguf"))
    async with app.run_test(size=SIZE) as pilot:
        status = app.query_one("#status", Static)
        await until(pilot, lambda: "pick a pair" in str(status.content), "the failed status")
        error = shown(app.query_one(".note-message.error", NoteMessage))
        assert "model file not found" in error and "nowhere.gguf" in error
