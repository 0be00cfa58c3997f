"""`ReplyFlow`: the reply flow through the chat column (`ChatColumn`, whose state it shares:
`ChatState`, `ReplyState`); `ChatPane` (`spectui.ui.chat_pane`), the `#chat-column` itself, adds
the chat's keys to it.

- A message typed while the models load waits (`ChatColumn.queue`) and is sent once the engine
  host says they are ready (`models_ready`).
- Up in an empty message box edits the last message: Enter resends it in place of the old turn
  (which, with its reply, leaves the chat), Escape cancels. Ctrl+R regenerates the last reply with
  the current K, drafter and settings. Either way the conversation, the store and the log drop
  the replaced turn together (`Conversation.truncate`, `ChatLog.remove_from_turn`).
- A reply runs through the session (`EngineSession.reply`, the reply core): the pane builds its
  `ReplyRequest` (`ChatOptions.reply_request`) and asks the engine host (`ReplyEngine`) for it;
  the host's reply worker posts its messages here — pieces (answer and thinking apart) into an
  `AssistantMessage`, its `ReplyFigures` under it and in the store, or its failure — and the
  pane handles them itself.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress

from textual.css.query import NoMatches

from spectui import faults
from spectui.chat.template import ChatMessage, PromptStyle
from spectui.engine.generation_config import DraftControl
from spectui.session.baseline import baseline_probe, from_stats
from spectui.session.figures import ReplyFigures, comparison_verdict, describe_k, meta_line
from spectui.session.options import models_record
from spectui.session.reply import ReplyDone
from spectui.ui.chat_column import ChatColumn
from spectui.ui.chat_view import AssistantMessage, Comparison
from spectui.ui.examples import ExampleOpenings
from spectui.ui.messages import ReplyBatch, ReplyFailed, ReplyFinished, ReplyPurpose
from spectui.ui.prompt import PromptInput


class ReplyFlow(ChatColumn):
    """Runs the reply flow: sends, queues, edits, regenerates, compares, stops, and handles what
    the reply worker posts."""

    async def models_ready(self) -> None:
        """The engine host's word that the models are loaded and measured: ready, and the
        message typed while they loaded sent."""
        self.ready_status()
        if self.replies.queued is not None:
            await self.send_queued()

    @property
    def stop_requested(self) -> threading.Event:
        """What the reply worker checks every cycle (set by `stop_reply`)."""
        return self.replies.stop_requested

    def stop_reply(self, status: str | None = "stopping…") -> None:
        """Stop the reply in progress at its next cycle (Escape, a quit, a new chat, the app
        ending), saying `status` while it stops (None: nothing drawn, the terminal may be gone)."""
        self.replies.stop_requested.set()
        if status is not None and self.replies.busy is not None:
            self.set_status(status, None)

    async def when_idle(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run `callback` now, or (stopping the running reply) once it has ended.

        A handler must not wait here for the reply to end: the messages that end it are
        handled only after this handler returns.
        """
        if self.replies.busy is None:
            await callback()
            return
        self.replies.after_idle = callback
        self.stop_reply()

    # ----- sending -------------------------------------------------------------------------------

    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        event.stop()
        text = event.text.strip()
        if not text:
            return
        editing = self.replies.editing
        if self.models_loading() and editing is None:
            await self.queue(text)
            return
        if editing is None and await self.host.reload_first(text):
            return
        if editing is not None and self.can_generate():
            await self.drop_turns(editing)
        if await self.submit(text):
            event.prompt.clear()

    def models_loading(self) -> bool:
        """Models are on their way (a message typed now can wait for them)."""
        return not self.host.pair.ready and not self.host.pair.load_failed

    async def submit(self, text: str) -> bool:
        """Send `text` as the user's next message; False when no reply can start now."""
        if not self.can_generate():
            return False
        for examples in self.query(ExampleOpenings):
            await examples.remove()
        self.prompt.focus()
        await self.add_user_turn(text)
        await self.start_reply()
        return True

    async def start_reply(self) -> None:
        """A reply to the conversation as it stands (after a new message, or to regenerate)."""
        conversation, options = self.chat.conversation, self.host.pair.options
        conversation.update(pair=options.pair_name, models=models_record(options), mode=self.chat.mode)
        title = "continuation" if self.chat.mode == "completion" else "assistant"
        await self.open_reply(title)
        self.host.panel.start_reply()
        self.begin_generation("reply", conversation.prompt_messages(), self.host.pair.draft_control)

    def can_generate(self) -> bool:
        if self.host.pair.load_failed:
            self.notify("no model is loaded (the error above says why): pick a pair with ctrl+p, "
                        "or restart with --target/--draft", severity="warning")
            return False
        if not self.host.pair.ready:
            self.notify("the models are still loading; one moment")
            return False
        if self.replies.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return False
        return True

    def prompt_style(self) -> PromptStyle:
        settings = self.chat.conversation.settings
        return PromptStyle(self.chat.mode, settings.thinking, settings.reasoning_effort)

    def begin_generation(self, purpose: ReplyPurpose, messages: list[ChatMessage], control: DraftControl) -> None:
        """Ask the app's reply worker for a reply (or a side-by-side re-run) to `messages`."""
        pair = self.host.pair
        self.replies.busy = purpose
        self.replies.stop_requested.clear()
        self.set_status("generating… (Escape stops)", None, bar=False)
        probe = baseline_probe(pair.baseline, pair.load_meter.others()) if purpose == "reply" else 0
        request = pair.options.reply_request(messages, control, settings=self.chat.conversation.settings,
                                             style=self.prompt_style(),
                                             baseline_probe=probe if control.enabled else 0,
                                             recommended=pair.recommended_sampling)
        self.replies.batcher = self.host.engine.generate_reply(request, purpose)

    async def send_queued(self) -> None:
        """The models are ready: send what was typed while they loaded."""
        text = await self.take_queued()
        if text is not None and not await self.submit(text):
            self.prompt.set_text(text)

    async def on_prompt_input_edit_last(self, event: PromptInput.EditLast) -> None:
        event.stop()
        await self.edit_last()

    async def edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        index = self.chat.conversation.last_user_index
        if index is None:
            self.notify("nothing to edit yet: send a message first")
            return
        if self.replies.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return
        self.cancel_edit()
        self.start_edit(index)
        self.set_status("editing your last message: Enter resends it (its reply is replaced), Escape cancels",
                        busy=False)

    async def regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        messages = self.chat.conversation.messages
        if not messages:
            self.notify("nothing to regenerate yet: send a message first")
            return
        if not self.can_generate():
            return
        self.cancel_edit()
        if messages[-1].role == "assistant":
            await self.drop_turns(len(messages) - 1)
        await self.start_reply()

    async def start_comparison(self, original: AssistantMessage, messages: list[ChatMessage]) -> None:
        """Re-run `messages` with speculation off, beside `original` (F5)."""
        self.replies.comparison = comparison = Comparison(original)
        await self.log_view.add(comparison)
        comparison.right.set_colouring(self.chat.colouring)
        comparison.left.set_colouring(self.chat.colouring)
        self.begin_generation("compare", messages, DraftControl(0, enabled=False))

    # ----- the reply streamed --------------------------------------------------------------------

    async def open_reply(self, title: str) -> AssistantMessage:
        """The widget the next reply streams into, at the end of the log."""
        widget = AssistantMessage(title=title, streaming=True, turn=len(self.chat.conversation.messages))
        self.replies.reply_widget = widget
        await self.log_view.add(widget)
        widget.set_colouring(self.chat.colouring)
        self.chat.conversation.start_reply()
        return widget

    async def on_reply_failed(self, message: ReplyFailed) -> None:
        """The reply worker's end when the reply failed (after its last pieces): said, then idle."""
        self.notify(message.text, severity="error", timeout=15)
        await self.note(message.text, "error")
        self.host.engine.set_reload_pending(self.host.pair.reload_pending or message.reload)
        await self.end_reply()

    async def on_reply_batch(self, message: ReplyBatch) -> None:
        """A batch from the reply worker: its pieces into their widget, the reply saved as it
        stands, its cycles into the panel."""
        if (batcher := self.replies.batcher) is not None and batcher.pace is not None:
            batcher.pace.observe()  # what drawing the last batch cost sets when the next comes
        with suppress(NoMatches):  # a batch that arrives as the app closes finds its widgets gone
            widget, comparison = self.replies.reply_widget, self.replies.comparison
            if message.purpose == "compare":
                widget = comparison.right if comparison else None
            if widget is not None:
                await widget.append(message.pieces)
            if message.purpose != "reply":
                return
            pair = self.host.pair
            k_label = None
            if message.cycles:
                self.replies.last_cycle_k = message.cycles[-1].k
                k_label = describe_k(pair.draft_control, pair.drafters, self.replies.last_cycle_k)
            thinking = widget.in_reasoning if widget is not None and widget.reasoning_pieces else None
            self.host.panel.reply_progress(message.cycles, message.totals, k_label, thinking)
            if widget is not None:
                self.chat.conversation.save_partial(widget.text, widget.reasoning)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        """The reply worker's end: the figures under the reply (or the re-run's verdict), the
        reply stored, a baseline it measured, a fault it met; then idle."""
        with suppress(NoMatches):  # the end of a reply that arrives as the app closes: quitting saved it
            finished = message.finished
            figures = finished.figures
            if message.speculation_off or finished.stats.probe_tokens:
                source = ("side-by-side re-run" if message.purpose == "compare" else
                          "reply with speculation off" if message.speculation_off else "probe at this reply's start")
                if (fresh := from_stats(finished.stats, source, self.host.pair.load_meter.others())) is not None:
                    self.host.engine.set_baseline(fresh)
            if message.purpose == "compare":
                await self._finish_comparison(figures)
            else:
                await self._finish_reply(finished)
            if (fault := faults.of_finished(finished, "app")) is not None:
                self.notify(fault.line, severity="error", timeout=15)
                await self.note(fault.line, "error")
                self.host.engine.set_reload_pending(self.host.pair.reload_pending or fault.reload)
            await self.end_reply()

    async def _finish_reply(self, finished: ReplyDone) -> None:
        widget = self.replies.reply_widget
        figures = finished.figures
        pair = self.host.pair
        if widget is not None:
            await widget.finish(figures, meta_line(figures, pair.options.show_timings))
        text = widget.text if widget else finished.text
        reasoning = widget.reasoning if widget else finished.reasoning
        conversation = self.chat.conversation
        if self.host.quit_state.quitting is not None and finished.reason == "cancelled":  # stopped by the quit:
            conversation.save_interrupted(text, reasoning, {**figures.stored(), "reason": "interrupted"})  # whole
        else:
            conversation.finish_reply(text, figures, reasoning)
        advice = self.host.panel.reply_finished(finished.stats, figures.thinking_tokens, pair.draft_same_model)
        if advice:
            self.notify(advice, severity="warning", timeout=10)

    async def _finish_comparison(self, figures: ReplyFigures) -> None:
        comparison = self.replies.comparison
        if comparison is None:
            return
        timings = self.host.pair.options.show_timings
        await comparison.right.finish(figures, meta_line(figures, timings))
        same = comparison.left.text == comparison.right.text
        comparison.set_verdict(comparison_verdict(comparison.left.figures, figures, same, timings))

    async def end_reply(self) -> None:
        """Back to idle after a reply, a comparison or a failure (or, quitting, out)."""
        await self.end_streaming()
        quitting = self.host.quit_state.quitting
        if quitting is not None:
            self.host.exit(return_code=quitting)
            return
        self.ready_status()
        if self.replies.after_idle is not None:
            callback, self.replies.after_idle = self.replies.after_idle, None
            await callback()

    async def end_streaming(self) -> None:
        """The reply or re-run has ended: one still streaming (it failed midway) is marked failed,
        what it said kept; the pane is idle again."""
        widget = self.replies.reply_widget
        failed = ReplyFigures.failed()
        if self.replies.busy == "reply" and widget is not None and widget.streaming:  # failed mid-reply
            await widget.finish(failed, "failed")
            self.chat.conversation.finish_reply(widget.text, failed, widget.reasoning)
        comparison = self.replies.comparison
        if self.replies.busy == "compare" and comparison and comparison.right.streaming:
            await comparison.right.finish(failed, "failed")
        self.replies.busy = None
        self.replies.reply_widget = None
