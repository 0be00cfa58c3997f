"""The app's key actions (shown in the footer): K, speculation, comparison, colours, stop, chats;
and the reply keys (Ctrl+R regenerates, the palette's "edit last message"), handed to the chat pane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spectui.chat.conversation import Conversation
from spectui.engine.drafters.spec import DrafterInfo
from spectui.ui.core import AppCore
from spectui.ui.screens import ChatsScreen


class Controls(AppCore):
    """The keys: K, speculation, drafter, comparison, colours, stop, chats. Every action runs on
    the UI thread and never blocks, and changes state through its owner's methods: the speculation
    keys the engine host's (the shared `DraftControl`, in place), the others the chat pane's."""

    if TYPE_CHECKING:  # the other parts' own, declared for the type checker only: at run time
        # nothing here may shadow them (the parts come before their owners in the app's MRO)
        def new_conversation(self) -> Conversation: ...
        def apply_chat_mode(self) -> None: ...
        def refresh_settings(self) -> None: ...
        async def show_examples(self) -> None: ...
        async def show_conversation(self, conversation: Conversation) -> None: ...

    def action_k_up(self) -> None:
        self._step_k(+1)

    def action_k_down(self) -> None:
        self._step_k(-1)

    def _step_k(self, delta: int) -> None:
        if not self.pair.drafters.can_speculate:
            self.notify(f"no drafter is running: K has no effect ({no_drafter_reason(self.pair.drafters)})")
            return
        k = self.engine.step_k(delta)
        self.refresh_k()
        off = "" if self.pair.draft_control.enabled else " (speculation is off: F4 turns it on)"
        self.notify(f"draft length K = {k}, from the next cycle{off}", timeout=2)

    def action_toggle_speculation(self) -> None:
        if not self.pair.drafters.can_speculate:
            self.notify(f"speculation is off: {no_drafter_reason(self.pair.drafters)}")
            return
        enabled = self.engine.toggle_speculation()
        self.refresh_k()
        self.notify(f"speculation {'on' if enabled else 'off'}", timeout=2)

    def action_next_drafter(self) -> None:
        """Cycle through the drafters the loaded models offer; applies from the next cycle."""
        kinds = self.pair.drafters.kinds
        if len(kinds) < 2:
            only = self.pair.drafters.label(None)
            self.notify(f"only one drafter is available ({only})" if kinds else
                        f"no drafter is running ({no_drafter_reason(self.pair.drafters)})")
            return
        current = self.pair.draft_control.drafter or self.pair.drafters.default
        kind = kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else kinds[0]
        self.engine.set_drafter(kind)
        self.refresh_k()
        self.notify(f"drafter: {self.pair.drafters.label(kind)}, from the next cycle", timeout=2)

    async def action_compare(self) -> None:
        """Re-run the last prompt with speculation off, beside the reply it gave."""
        original = self.log_view.last_reply()
        upto = self.chat.conversation.last_user_index
        if original is None or upto is None or original.streaming:
            self.notify("nothing to compare yet: send a message first")
            return
        if not self.chat_pane.can_generate():
            return
        await self.chat_pane.start_comparison(original, self.chat.conversation.prompt_messages(upto + 1))

    def action_toggle_colours(self) -> None:
        self.panel.show_legend(self.chat_pane.toggle_colours())

    async def action_stop(self) -> None:
        """Escape: stop the reply; else cancel the queued message; else stop editing."""
        if self.replies.busy is not None:
            self.stop_reply()
        elif not await self.chat_pane.cancel_queued() and self.chat_pane.cancel_edit():
            self.notify("edit cancelled", timeout=2)

    def stop_reply(self) -> None:
        if self.replies.busy is not None:
            self.chat_pane.stop_reply()

    async def action_new_chat(self) -> None:
        await self.chat_pane.when_idle(self._new_chat)

    async def _new_chat(self) -> None:
        await self.chat_pane.start_chat(self.new_conversation())
        self.panel.start_chat()
        self.apply_chat_mode()
        self.refresh_settings()
        await self.show_examples()
        self.notify("new chat", timeout=2)

    def action_open_chats(self) -> None:
        self.push_screen(ChatsScreen(self.chat.store.list_chats()), self._open_chat)

    async def _open_chat(self, chat_id: int | None) -> None:
        if chat_id is None:
            return

        async def reopen() -> None:
            self.chat_pane.cancel_edit()
            await self.show_conversation(Conversation.open(self.chat.store, chat_id, self.pair.options.chat_settings()))

        await self.chat_pane.when_idle(reopen)

    async def action_edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        await self.chat_pane.edit_last()

    async def action_regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        await self.chat_pane.regenerate()

    def choose_pair(self, name: str, pulled: bool) -> None:
        """From the pair picker: load a pulled pair, or pull it first (with progress)."""
        self.stop_reply()
        self.set_status(f"{'opening' if pulled else 'pulling'} pair {name}…", None)
        self.engine.open_pair(name, pulled)


def no_drafter_reason(drafters: DrafterInfo) -> str:
    """Why nothing can draft, for the user: the load's own note, or what to do."""
    if drafters.notes:
        return drafters.notes[0]
    return ("start with a draft model (--draft, or a pair with ctrl+p), or with a lookup that needs none: "
            "--drafter suffix or --drafter ngram")
