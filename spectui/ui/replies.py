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

import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from textual.css.query import NoMatches

from spectui import faults
from spectui.chat.conversation import Conversation
from spectui.chat.settings import ChatSettings
from spectui.chat.template import ChatMessage, PromptStyle
from spectui.engine.config import DraftControl, RecommendedSampling
from spectui.engine.drafters.spec import DrafterInfo
from spectui.session.baseline import Baseline, baseline_probe, from_stats
from spectui.session.figures import ReplyFigures, comparison_verdict, describe_k, meta_line
from spectui.session.machine import LoadMeter
from spectui.session.options import ChatOptions
from spectui.session.reply import ReplyDone, ReplyRequest
from spectui.ui.chat_actions import models_record
from spectui.ui.chat_view import AssistantMessage, ChatLog, Comparison, UserMessage
from spectui.ui.examples import ExampleOpenings
from spectui.ui.messages import ReplyFinished, ReplyPurpose, ReplyUpdate
from spectui.ui.prompt import PromptInput
from spectui.ui.stats_panel import StatsPanel, low_acceptance_advice


class Replies:
    """Mixed into `SpectuiApp` (which provides what is declared here, annotations only)."""

    options: ChatOptions
    conversation: Conversation
    drafters: DrafterInfo
    draft_control: DraftControl
    recommended_sampling: RecommendedSampling | None
    stop_requested: threading.Event
    ready: bool
    load_failed: bool
    busy: ReplyPurpose | None
    mode: str
    colouring: bool
    baseline: Baseline | None
    load_meter: LoadMeter
    reply_widget: AssistantMessage | None
    comparison: Comparison | None
    last_cycle_k: int | None
    draft_same_model: bool
    after_idle: Callable[[], Awaitable[None]] | None
    quitting: int | None
    reload_pending: bool
    reload_first: Callable[[str], Awaitable[bool]]
    exit: Callable[..., None]
    queued: UserMessage | None
    editing: int | None
    notify: Callable[..., None]
    query: Callable[..., Any]
    note: Callable[..., Awaitable[None]]
    set_status: Callable[..., None]
    refresh_status: Callable[[], None]
    ready_status: Callable[[], None]
    set_baseline: Callable[[Baseline], None]
    generate_reply: Callable[[ReplyRequest, ReplyPurpose], Any]

    if TYPE_CHECKING:  # the app's own, declared for the type checker only: at run time nothing
        # here may shadow them (the mixins come before their owners in the app's MRO)
        @property
        def log_view(self) -> ChatLog: ...
        @property
        def panel(self) -> StatsPanel: ...
        @property
        def prompt(self) -> PromptInput: ...

    # ----- sending ---------------------------------------------------------------------------

    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        editing = self.editing
        if self.loading() and editing is None:
            await self.queue(text)
            return
        if editing is None and await self.reload_first(text):
            return
        if editing is not None and self.can_generate():
            await self.drop_turns(editing)
        if await self.submit(text):
            event.prompt.clear()

    def loading(self) -> bool:
        """Models are on their way (a message typed now can wait for them)."""
        return not self.ready and not self.load_failed

    async def submit(self, text: str) -> bool:
        """Send `text` as the user's next message; False when no reply can start now."""
        if not self.can_generate():
            return False
        for examples in self.query(ExampleOpenings):
            await examples.remove()
        self.prompt.focus()
        self.conversation.add_user(text)
        await self.log_view.add(UserMessage(text, len(self.conversation.messages) - 1))
        await self.start_reply()
        return True

    async def start_reply(self) -> None:
        """A reply to the conversation as it stands (after a new message, or to regenerate)."""
        self.conversation.update(pair=self.options.pair_name, models=models_record(self.options), mode=self.mode)
        title = "continuation" if self.mode == "completion" else "assistant"
        self.reply_widget = AssistantMessage(title=title, streaming=True, turn=len(self.conversation.messages))
        await self.log_view.add(self.reply_widget)
        self.reply_widget.set_colouring(self.colouring)
        self.conversation.start_reply()
        self.panel.start_reply()
        self.begin_generation("reply", self.conversation.prompt_messages(), self.draft_control)

    def can_generate(self) -> bool:
        if self.load_failed:
            self.notify("no model is loaded (the error above says why): pick a pair with ctrl+p, "
                        "or restart with --target/--draft", severity="warning")
            return False
        if not self.ready:
            self.notify("the models are still loading; one moment")
            return False
        if self.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return False
        return True

    def prompt_style(self) -> PromptStyle:
        settings = self.conversation.settings
        return PromptStyle(self.mode, settings.thinking, settings.reasoning_effort)

    def begin_generation(self, purpose: ReplyPurpose, messages: list[ChatMessage],
                         control: DraftControl) -> None:
        self.busy = purpose
        self.stop_requested.clear()
        self.set_status("generating… (Escape stops)", None)
        probe = baseline_probe(self.baseline, self.load_meter.others()) if purpose == "reply" else 0
        settings: ChatSettings = self.conversation.settings
        request = self.options.reply_request(messages, control, settings=settings, style=self.prompt_style(),
                                             baseline_probe=probe if control.enabled else 0,
                                             recommended=self.recommended_sampling)
        self.generate_reply(request, purpose)

    # ----- queued, edited, regenerated --------------------------------------------------------

    async def queue(self, text: str) -> None:
        """Keep the message until the models are ready (one at a time)."""
        if self.queued is not None:
            self.notify("a message is already waiting for the models (Escape cancels it)")
            return
        self.queued = UserMessage(text, queued=True)
        await self.log_view.add(self.queued)
        self.prompt.clear()
        self.refresh_status()

    async def send_queued(self) -> None:
        """The models are ready: send what was typed while they loaded."""
        widget, self.queued = self.queued, None
        if widget is None:
            return
        await widget.remove()
        if not await self.submit(widget.text):
            self.prompt.set_text(widget.text)

    async def cancel_queued(self, reason: str = "the queued message was cancelled") -> bool:
        """Give the queued text back to the message box; False when nothing was queued."""
        widget, self.queued = self.queued, None
        if widget is None:
            return False
        await widget.remove()
        if not self.prompt.text.strip():
            self.prompt.set_text(widget.text)
        self.refresh_status()
        self.notify(f"{reason}: its text is back in the message box", timeout=4)
        return True

    async def on_prompt_input_edit_last(self, event: PromptInput.EditLast) -> None:
        await self.action_edit_last()

    async def action_edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        index = self.conversation.last_user_index
        if index is None:
            self.notify("nothing to edit yet: send a message first")
            return
        if self.busy is not None:
            self.notify("a reply is running: wait for it, or press Escape to stop it")
            return
        self.cancel_edit()
        self.editing = index
        self.prompt.set_text(self.conversation.messages[index].content)
        self.prompt.focus()
        if (widget := self.log_view.turn_widget(index)) is not None:
            widget.add_class("-editing")
        self.set_status("editing your last message: Enter resends it (its reply is replaced), Escape cancels",
                        busy=False)

    def cancel_edit(self) -> bool:
        if self.editing is None:
            return False
        if (widget := self.log_view.turn_widget(self.editing)) is not None:
            widget.remove_class("-editing")
        self.editing = None
        self.prompt.clear()
        self.ready_status()
        return True

    async def drop_turns(self, index: int) -> None:
        """Take the turn at `index` and all after it out of the chat, the store and the log."""
        self.editing = None
        self.conversation.truncate(index)
        await self.log_view.remove_from_turn(index)

    async def action_regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        messages = self.conversation.messages
        if not messages:
            self.notify("nothing to regenerate yet: send a message first")
            return
        if not self.can_generate():
            return
        self.cancel_edit()
        if messages[-1].role == "assistant":
            await self.drop_turns(len(messages) - 1)
        await self.start_reply()

    # ----- streaming -------------------------------------------------------------------------

    def _target_widget(self, purpose: ReplyPurpose) -> AssistantMessage | None:
        if purpose == "compare":
            return self.comparison.right if self.comparison else None
        return self.reply_widget

    async def on_reply_update(self, message: ReplyUpdate) -> None:
        with suppress(NoMatches):  # a batch that arrives as the app closes finds its widgets gone
            await self._show_update(message)

    async def _show_update(self, message: ReplyUpdate) -> None:
        widget = self._target_widget(message.purpose)
        if widget is not None:
            await widget.append(message.pieces)
        if message.purpose != "reply":
            return
        state = self.panel.state
        state.cycles.extend(message.cycles)
        state.totals = message.totals or state.totals
        if message.cycles:
            self.last_cycle_k = message.cycles[-1].k
            state.k_label = describe_k(self.draft_control, self.drafters, self.last_cycle_k)
        if widget is not None and widget.reasoning_pieces:
            state.follow_thinking(widget.in_reasoning)
        self.panel.show()
        if widget is not None:
            self.conversation.save_partial(widget.text, widget.reasoning)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        with suppress(NoMatches):  # the end of a reply that arrives as the app closes: quitting saved it
            await self._show_finished(message)

    async def _show_finished(self, message: ReplyFinished) -> None:
        finished = message.finished
        figures = finished.figures
        if message.speculation_off or finished.stats.probe_tokens:
            source = ("side-by-side re-run" if message.purpose == "compare" else
                      "reply with speculation off" if message.speculation_off else "probe at this reply's start")
            if (fresh := from_stats(finished.stats, source, self.load_meter.others())) is not None:
                self.set_baseline(fresh)
        if message.purpose == "compare":
            await self._finish_comparison(figures)
        else:
            await self._finish_reply(finished)
        if (fault := faults.of_finished(finished, "app")) is not None:
            self.notify(fault.line, severity="error", timeout=15)
            await self.note(fault.line, "error")
            self.reload_pending = self.reload_pending or fault.reload
        await self.end_reply()

    async def _finish_reply(self, finished: ReplyDone) -> None:
        widget = self.reply_widget
        figures = finished.figures
        if widget is not None:
            await widget.finish(figures, meta_line(figures, self.options.show_timings))
        text = widget.text if widget else finished.text
        reasoning = widget.reasoning if widget else finished.reasoning
        if self.quitting is not None and finished.reason == "cancelled":  # stopped by the quit: kept whole
            self.conversation.save_interrupted(text, reasoning, {**figures.stored(), "reason": "interrupted"})
        else:
            self.conversation.finish_reply(text, figures, reasoning)
        state = self.panel.state
        state.totals = finished.stats
        if figures.thinking_tokens:
            state.thinking_tokens, state.thinking_live = figures.thinking_tokens, False
        advice = low_acceptance_advice(finished.stats, state.k_label, self.draft_same_model)
        state.notes = [advice] if advice else []
        self.panel.show()
        if advice:
            self.notify(advice, severity="warning", timeout=10)

    async def _finish_comparison(self, figures: ReplyFigures) -> None:
        comparison = self.comparison
        if comparison is None:
            return
        await comparison.right.finish(figures, meta_line(figures, self.options.show_timings))
        same = comparison.left.text == comparison.right.text
        comparison.set_verdict(comparison_verdict(comparison.left.figures, figures, same, self.options.show_timings))

    async def end_reply(self) -> None:
        """Back to idle after a reply, a comparison or a failure."""
        widget = self.reply_widget
        failed = ReplyFigures.failed()
        if self.busy == "reply" and widget is not None and widget.streaming:  # failed mid-reply
            await widget.finish(failed, "failed")
            self.conversation.finish_reply(widget.text, failed, widget.reasoning)
        if self.busy == "compare" and self.comparison and self.comparison.right.streaming:
            await self.comparison.right.finish(failed, "failed")
        self.busy = None
        self.reply_widget = None
        if self.quitting is not None:
            self.exit(return_code=self.quitting)
            return
        self.ready_status()
        if self.after_idle is not None:
            callback, self.after_idle = self.after_idle, None
            await callback()

