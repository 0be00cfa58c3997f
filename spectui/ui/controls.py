"""The app's key actions (shown in the footer): K, speculation, comparison, colours, stop, chats."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from spectui.chat.conversation import Conversation
from spectui.chat.safe_store import SafeStore
from spectui.chat.template import ChatMessage
from spectui.engine.config import DraftControl
from spectui.engine.drafters.spec import DrafterInfo
from spectui.session.options import ChatOptions
from spectui.ui.chat_view import AssistantMessage, ChatLog, Comparison
from spectui.ui.messages import ReplyPurpose
from spectui.ui.screens import ChatsScreen
from spectui.ui.stats_panel import StatsPanel


class Controls:
    """Mixed into `SpectuiApp`; every action runs on the UI thread and never blocks.

    The app provides the state and helpers declared below (annotations only, so nothing here
    shadows the app's own definitions and this module needs no import of the app).
    """

    drafters: DrafterInfo
    draft_control: DraftControl
    colouring: bool
    conversation: Conversation
    comparison: Comparison | None
    store: SafeStore
    options: ChatOptions
    busy: ReplyPurpose | None
    stop_requested: threading.Event
    ready: bool
    after_idle: Callable[[], Awaitable[None]] | None
    notify: Callable[..., None]
    query: Callable[..., Any]
    push_screen: Callable[..., Any]
    refresh_k: Callable[[], None]
    set_status: Callable[..., None]
    can_generate: Callable[[], bool]
    begin_generation: Callable[[ReplyPurpose, Sequence[ChatMessage], DraftControl], None]
    prepare_pair: Callable[[str, bool], Any]
    new_conversation: Callable[[], Conversation]
    cancel_edit: Callable[[], bool]
    apply_chat_mode: Callable[[], None]
    refresh_settings: Callable[[], None]
    show_examples: Callable[[], Awaitable[None]]

    if TYPE_CHECKING:  # the app's own, declared for the type checker only: at run time nothing
        # here may shadow them (the mixins come before their owners in the app's MRO)
        @property
        def log_view(self) -> ChatLog: ...
        @property
        def panel(self) -> StatsPanel: ...
        async def show_conversation(self, conversation: Conversation) -> None: ...
        async def cancel_queued(self, reason: str = ...) -> bool: ...

    def action_k_up(self) -> None:
        self._step_k(+1)

    def action_k_down(self) -> None:
        self._step_k(-1)

    def _step_k(self, delta: int) -> None:
        if not self.drafters.can_speculate:
            self.notify(f"no drafter is running: K has no effect ({no_drafter_reason(self.drafters)})")
            return
        k = self.draft_control.step(delta)
        self.refresh_k()
        off = "" if self.draft_control.enabled else " (speculation is off: F4 turns it on)"
        self.notify(f"draft length K = {k}, from the next cycle{off}", timeout=2)

    def action_toggle_speculation(self) -> None:
        if not self.drafters.can_speculate:
            self.notify(f"speculation is off: {no_drafter_reason(self.drafters)}")
            return
        enabled = self.draft_control.toggle()
        self.refresh_k()
        self.notify(f"speculation {'on' if enabled else 'off'}", timeout=2)

    def action_next_drafter(self) -> None:
        """Cycle through the drafters the loaded models offer; applies from the next cycle."""
        kinds = self.drafters.kinds
        if len(kinds) < 2:
            only = self.drafters.label(None)
            self.notify(f"only one drafter is available ({only})" if kinds else
                        f"no drafter is running ({no_drafter_reason(self.drafters)})")
            return
        current = self.draft_control.drafter or self.drafters.default
        kind = kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else kinds[0]
        self.draft_control.set_drafter(kind)
        self.refresh_k()
        self.notify(f"drafter: {self.drafters.label(kind)}, from the next cycle", timeout=2)

    async def action_compare(self) -> None:
        """Re-run the last prompt with speculation off, beside the reply it gave."""
        original = self.log_view.last_reply()
        upto = self.conversation.last_user_index
        if original is None or upto is None or original.streaming:
            self.notify("nothing to compare yet: send a message first")
            return
        if not self.can_generate():
            return
        self.comparison = Comparison(original)
        await self.log_view.add(self.comparison)
        self.comparison.right.set_colouring(self.colouring)
        self.comparison.left.set_colouring(self.colouring)
        messages = self.conversation.prompt_messages(upto + 1)
        self.begin_generation("compare", messages, DraftControl(0, enabled=False))

    def action_toggle_colours(self) -> None:
        self.colouring = not self.colouring
        for message in self.query(AssistantMessage):
            message.set_colouring(self.colouring)
        self.panel.show_legend(self.colouring)

    async def action_stop(self) -> None:
        """Escape: stop the reply; else cancel the queued message; else stop editing."""
        if self.busy is not None:
            self.stop_reply()
        elif not await self.cancel_queued() and self.cancel_edit():
            self.notify("edit cancelled", timeout=2)

    def stop_reply(self) -> None:
        if self.busy is not None:
            self.stop_requested.set()
            self.set_status("stopping…", None)

    async def action_new_chat(self) -> None:
        await self.when_idle(self._new_chat)

    async def _new_chat(self) -> None:
        self.cancel_edit()
        self.conversation = self.new_conversation()
        await self.log_view.remove_children()
        self.panel.start_reply()
        self.panel.state.notes = []
        self.apply_chat_mode()
        self.refresh_settings()
        await self.show_examples()
        self.notify("new chat", timeout=2)

    async def when_idle(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run `callback` now, or (stopping the running reply) once it has ended.

        A handler must not wait here for the reply to end: the messages that end it are
        handled only after this handler returns.
        """
        if self.busy is None:
            await callback()
            return
        self.after_idle = callback
        self.stop_reply()

    def action_open_chats(self) -> None:
        self.push_screen(ChatsScreen(self.store.list_chats()), self._open_chat)

    async def _open_chat(self, chat_id: int | None) -> None:
        if chat_id is None:
            return

        async def reopen() -> None:
            self.cancel_edit()
            await self.show_conversation(Conversation.open(self.store, chat_id, self.options.chat_settings()))

        await self.when_idle(reopen)

    def choose_pair(self, name: str, pulled: bool) -> None:
        """From the pair picker: load a pulled pair, or pull it first (with progress)."""
        self.stop_reply()
        self.ready = False
        self.set_status(f"{'opening' if pulled else 'pulling'} pair {name}…", None)
        self.prepare_pair(name, pulled)


def no_drafter_reason(drafters: DrafterInfo) -> str:
    """Why nothing can draft, for the user: the load's own note, or what to do."""
    if drafters.notes:
        return drafters.notes[0]
    return ("start with a draft model (--draft, or a pair with ctrl+p), or with a lookup that needs none: "
            "--drafter suffix or --drafter ngram")
