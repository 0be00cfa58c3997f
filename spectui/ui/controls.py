"""The app's key actions (shown in the footer): K, speculation, comparison, colours, chats."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from spectui.chat.conversation import Conversation
from spectui.engine.config import DraftControl
from spectui.ui.chat_view import AssistantMessage, Comparison
from spectui.ui.screens import ChatsScreen

if TYPE_CHECKING:
    from spectui.ui.app import SpectuiApp

    _Base = SpectuiApp
else:
    _Base = object


class Controls(_Base):
    """Mixed into `SpectuiApp`; every action runs on the UI thread and never blocks."""

    def action_k_up(self) -> None:
        self._step_k(+1)

    def action_k_down(self) -> None:
        self._step_k(-1)

    def _step_k(self, delta: int) -> None:
        if not self.has_draft:
            self.notify("no draft model is loaded: K has no effect (pick a pair with ctrl+p)")
            return
        k = self.draft_control.step(delta)
        self.refresh_k()
        off = "" if self.draft_control.enabled else " (speculation is off: F4 turns it on)"
        self.notify(f"draft length K = {k}, from the next cycle{off}", timeout=2)

    def action_toggle_speculation(self) -> None:
        if not self.has_draft:
            self.notify("no draft model is loaded, so speculation is off")
            return
        enabled = self.draft_control.toggle()
        self.refresh_k()
        self.notify(f"speculation {'on' if enabled else 'off'}", timeout=2)

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

    def action_stop(self) -> None:
        if self.busy is not None:
            self.stop_requested.set()
            self.set_status("stopping…", None)

    async def action_new_chat(self) -> None:
        await self.when_idle(self._new_chat)

    async def _new_chat(self) -> None:
        self.conversation = Conversation(self.store, self.options.pair_name, self.options.system)
        await self.log_view.remove_children()
        self.panel.start_reply()
        self.panel.state.notes = []
        self.panel.show()
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
        self.action_stop()

    def action_open_chats(self) -> None:
        self.push_screen(ChatsScreen(self.store.list_chats()), self._open_chat)

    async def _open_chat(self, chat_id: int | None) -> None:
        if chat_id is None:
            return

        async def reopen() -> None:
            await self.show_conversation(Conversation.open(self.store, chat_id))
            self.conversation.pair = self.options.pair_name

        await self.when_idle(reopen)

    def choose_pair(self, name: str, pulled: bool) -> None:
        """From the pair picker: load a pulled pair, or pull it first (with progress)."""
        self.action_stop()
        self.ready = False
        self.set_status(f"{'opening' if pulled else 'pulling'} pair {name}…", None)
        self.prepare_pair(name, pulled)
