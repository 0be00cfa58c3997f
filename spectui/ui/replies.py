"""Sending turns and receiving replies. Mixed into `SpectuiApp`.

- A message typed while the models load is queued (shown as such, said in the status line) and
  sent once they are ready; Escape cancels it and gives the text back to the message box.
- Up in an empty message box edits the last message: Enter resends it in place of the old turn
  (which, with its reply, leaves the chat), Escape cancels. Ctrl+R regenerates the last reply with
  the current K, drafter and settings. Either way the conversation, the store and the log drop
  the replaced turn together (`Conversation.truncate`, `ChatLog.remove_from_turn`).
- A reply runs through the reply core (`spectui.session.reply`): the app builds its
  `ReplyRequest` (`ChatOptions.reply_request`), the worker posts its pieces (answer and thinking
  apart) into an `AssistantMessage`, and its `ReplyFigures` end up under it and in the store.
"""

from __future__ import annotations

from contextlib import suppress
from typing import TYPE_CHECKING

from textual.css.query import NoMatches
from textual.worker import Worker

from spectui import faults
from spectui.chat.settings import ChatSettings
from spectui.chat.template import ChatMessage, PromptStyle
from spectui.engine.config import DraftControl
from spectui.session.baseline import baseline_probe, from_stats
from spectui.session.figures import ReplyFigures, comparison_verdict, describe_k, meta_line
from spectui.session.reply import ReplyDone, ReplyRequest
from spectui.ui.chat_actions import models_record
from spectui.ui.core import AppCore
from spectui.ui.examples import ExampleOpenings
from spectui.ui.messages import ReplyFinished, ReplyPurpose, ReplyUpdate
from spectui.ui.prompt import PromptInput


class Replies(AppCore):
    """The reply flow: sending, the queued message, editing, regenerating, streaming. Writes
    `app.replies`."""

    if TYPE_CHECKING:  # the other parts' own, declared for the type checker only: at run time
        # nothing here may shadow them (the parts come before their owners in the app's MRO)
        async def reload_first(self, text: str) -> bool: ...
        def generate_reply(self, request: ReplyRequest, purpose: ReplyPurpose) -> Worker[None]: ...

    # ----- sending ---------------------------------------------------------------------------

    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        editing = self.replies.editing
        if self.loading() and editing is None:
            await self.chat_pane.queue(text)
            return
        if editing is None and await self.reload_first(text):
            return
        if editing is not None and self.can_generate():
            await self.chat_pane.drop_turns(editing)
        if await self.submit(text):
            event.prompt.clear()

    def loading(self) -> bool:
        """Models are on their way (a message typed now can wait for them)."""
        return not self.pair.ready and not self.pair.load_failed

    async def submit(self, text: str) -> bool:
        """Send `text` as the user's next message; False when no reply can start now."""
        if not self.can_generate():
            return False
        for examples in self.query(ExampleOpenings):
            await examples.remove()
        self.prompt.focus()
        await self.chat_pane.add_user_turn(text)
        await self.start_reply()
        return True

    async def start_reply(self) -> None:
        """A reply to the conversation as it stands (after a new message, or to regenerate)."""
        conversation, options = self.chat.conversation, self.pair.options
        conversation.update(pair=options.pair_name, models=models_record(options), mode=self.chat.mode)
        title = "continuation" if self.chat.mode == "completion" else "assistant"
        await self.chat_pane.open_reply(title)
        self.panel.start_reply()
        self.begin_generation("reply", self.chat.conversation.prompt_messages(), self.pair.draft_control)

    def can_generate(self) -> bool:
        if self.pair.load_failed:
            self.notify("no model is loaded (the error above says why): pick a pair with ctrl+p, "
                        "or restart with --target/--draft", severity="warning")
            return False
        if not self.pair.ready:
            self.notify("the models are still loading; one moment")
            return False
        if self.replies.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return False
        return True

    def prompt_style(self) -> PromptStyle:
        settings = self.chat.conversation.settings
        return PromptStyle(self.chat.mode, settings.thinking, settings.reasoning_effort)

    def begin_generation(self, purpose: ReplyPurpose, messages: list[ChatMessage],
                         control: DraftControl) -> None:
        self.replies.busy = purpose
        self.replies.stop_requested.clear()
        self.set_status("generating… (Escape stops)", None)
        probe = baseline_probe(self.pair.baseline, self.pair.load_meter.others()) if purpose == "reply" else 0
        settings: ChatSettings = self.chat.conversation.settings
        request = self.pair.options.reply_request(messages, control, settings=settings, style=self.prompt_style(),
                                             baseline_probe=probe if control.enabled else 0,
                                             recommended=self.pair.recommended_sampling)
        self.generate_reply(request, purpose)

    # ----- queued, edited, regenerated --------------------------------------------------------

    async def send_queued(self) -> None:
        """The models are ready: send what was typed while they loaded."""
        text = await self.chat_pane.take_queued()
        if text is not None and not await self.submit(text):
            self.prompt.set_text(text)

    async def on_prompt_input_edit_last(self, event: PromptInput.EditLast) -> None:
        await self.action_edit_last()

    async def action_edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        index = self.chat.conversation.last_user_index
        if index is None:
            self.notify("nothing to edit yet: send a message first")
            return
        if self.replies.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return
        self.cancel_edit()
        self.chat_pane.start_edit(index)
        self.set_status("editing your last message: Enter resends it (its reply is replaced), Escape cancels",
                        busy=False)

    def cancel_edit(self) -> bool:
        if not self.chat_pane.end_edit():
            return False
        self.ready_status()
        return True

    async def action_regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        messages = self.chat.conversation.messages
        if not messages:
            self.notify("nothing to regenerate yet: send a message first")
            return
        if not self.can_generate():
            return
        self.cancel_edit()
        if messages[-1].role == "assistant":
            await self.chat_pane.drop_turns(len(messages) - 1)
        await self.start_reply()

    # ----- streaming -------------------------------------------------------------------------

    async def on_reply_update(self, message: ReplyUpdate) -> None:
        with suppress(NoMatches):  # a batch that arrives as the app closes finds its widgets gone
            await self._show_update(message)

    async def _show_update(self, message: ReplyUpdate) -> None:
        widget = await self.chat_pane.show_pieces(message)
        if message.purpose != "reply":
            return
        k_label = None
        if message.cycles:
            self.replies.last_cycle_k = message.cycles[-1].k
            k_label = describe_k(self.pair.draft_control, self.pair.drafters, self.replies.last_cycle_k)
        thinking = widget.in_reasoning if widget is not None and widget.reasoning_pieces else None
        self.panel.reply_progress(message.cycles, message.totals, k_label, thinking)
        if widget is not None:
            self.chat.conversation.save_partial(widget.text, widget.reasoning)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        with suppress(NoMatches):  # the end of a reply that arrives as the app closes: quitting saved it
            await self._show_finished(message)

    async def _show_finished(self, message: ReplyFinished) -> None:
        finished = message.finished
        figures = finished.figures
        if message.speculation_off or finished.stats.probe_tokens:
            source = ("side-by-side re-run" if message.purpose == "compare" else
                      "reply with speculation off" if message.speculation_off else "probe at this reply's start")
            if (fresh := from_stats(finished.stats, source, self.pair.load_meter.others())) is not None:
                self.set_baseline(fresh)
        if message.purpose == "compare":
            await self._finish_comparison(figures)
        else:
            await self._finish_reply(finished)
        if (fault := faults.of_finished(finished, "app")) is not None:
            self.notify(fault.line, severity="error", timeout=15)
            await self.note(fault.line, "error")
            self.pair.reload_pending = self.pair.reload_pending or fault.reload
        await self.end_reply()

    async def _finish_reply(self, finished: ReplyDone) -> None:
        widget = self.replies.reply_widget
        figures = finished.figures
        if widget is not None:
            await widget.finish(figures, meta_line(figures, self.pair.options.show_timings))
        text = widget.text if widget else finished.text
        reasoning = widget.reasoning if widget else finished.reasoning
        if self.quit_state.quitting is not None and finished.reason == "cancelled":  # stopped by the quit: kept whole
            self.chat.conversation.save_interrupted(text, reasoning, {**figures.stored(), "reason": "interrupted"})
        else:
            self.chat.conversation.finish_reply(text, figures, reasoning)
        advice = self.panel.reply_finished(finished.stats, figures.thinking_tokens, self.pair.draft_same_model)
        if advice:
            self.notify(advice, severity="warning", timeout=10)

    async def _finish_comparison(self, figures: ReplyFigures) -> None:
        comparison = self.replies.comparison
        if comparison is None:
            return
        await comparison.right.finish(figures, meta_line(figures, self.pair.options.show_timings))
        same = comparison.left.text == comparison.right.text
        timings = self.pair.options.show_timings
        comparison.set_verdict(comparison_verdict(comparison.left.figures, figures, same, timings))

    async def end_reply(self) -> None:
        """Back to idle after a reply, a comparison or a failure."""
        await self.chat_pane.end_streaming()
        if self.quit_state.quitting is not None:
            self.exit(return_code=self.quit_state.quitting)
            return
        self.ready_status()
        if self.replies.after_idle is not None:
            callback, self.replies.after_idle = self.replies.after_idle, None
            await callback()

