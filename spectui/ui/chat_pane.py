"""`ChatPane`, the `#chat-column`: the chat column (`ChatColumn`) and its reply flow
(`ReplyFlow`), with the chat's keys (shown in the footer) and actions.

The keys are bound here, on the widget whose state they change, not on the app: the focus is
always in the chat column (the message box, the log, a reply, an example opening), so a key
reaches the pane as it reached the app, and the footer lists them in the same order. Each action
runs on the UI thread, never blocks, and changes state through its owner's methods: the chat
column's (`app.chat`, `app.replies`), the engine host's for the speculation keys (the shared
`DraftControl`, in place: `EngineHost.step_k`, `toggle_speculation`, `next_drafter`). The command
palette's chat entries (`chat_palette`) run the same actions here.

A chat's settings, thinking on/off, copying a reply, exporting the chat are here too.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.dom import DOMNode

from spectui.catalog.demo import welcome
from spectui.chat.chat_settings import EFFORTS, ChatSettings
from spectui.chat.conversation import Conversation
from spectui.errors import SpectuiError
from spectui.session.figures import plural
from spectui.ui.chat_view import AssistantMessage, NoteMessage
from spectui.ui.examples import ExampleOpenings
from spectui.ui.reply_flow import ReplyFlow
from spectui.ui.screens import ChatsScreen
from spectui.ui.settings_screen import SettingsResult, SettingsScreen


class ChatPane(ReplyFlow):
    """The chat's keys and actions: K, speculation, drafter, comparison, colours, stop, chats,
    regenerate, edit, settings, thinking, copy, export, the example openings."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # Not run here (the app's priority binding runs first): named first only so that the
        # footer, which lists keys in the order it first meets them, keeps Quit first.
        Binding("ctrl+q", "app.quit", "Quit"),
        Binding("f2", "k_down", "K-"),
        Binding("f3", "k_up", "K+"),
        Binding("f4", "toggle_speculation", "Spec"),
        Binding("f5", "compare", "K=0"),
        Binding("f6", "toggle_colours", "Colours"),
        Binding("f7", "next_drafter", "Drafter"),
        Binding("f8", "examples", "Examples", show=False),
        Binding("f9", "copy_reply", "Copy", show=False),
        Binding("f10", "export", "Export", show=False),
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Regenerate", show=False),
        Binding("ctrl+t", "toggle_thinking", "Thinking", show=False),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+n", "new_chat", "New chat", show=False),
        Binding("ctrl+o", "open_chats", "Chats"),
    ]

    # ----- the speculation keys: the engine host's draft control -----------------------------------

    def action_k_up(self) -> None:
        self.host.engine.step_k(+1)

    def action_k_down(self) -> None:
        self.host.engine.step_k(-1)

    def action_toggle_speculation(self) -> None:
        self.host.engine.toggle_speculation()

    def action_next_drafter(self) -> None:
        """Cycle through the drafters the loaded models offer; applies from the next cycle."""
        self.host.engine.next_drafter()

    # ----- the reply keys --------------------------------------------------------------------------

    async def action_compare(self) -> None:
        """Re-run the last prompt with speculation off, beside the reply it gave."""
        original = self.log_view.last_reply()
        upto = self.chat.conversation.last_user_index
        if original is None or upto is None or original.streaming:
            self.notify("nothing to compare yet: send a message first")
            return
        if not self.can_generate():
            return
        await self.start_comparison(original, self.chat.conversation.prompt_messages(upto + 1))

    def action_toggle_colours(self) -> None:
        self.host.panel.show_legend(self.toggle_colours())

    async def action_stop(self) -> None:
        """Escape: stop the reply; else cancel the queued message; else stop editing."""
        if self.replies.busy is not None:
            self.stop_reply()
        elif not await self.cancel_queued() and self.cancel_edit():
            self.notify("edit cancelled", timeout=2)

    async def action_edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        await self.edit_last()

    async def action_regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        await self.regenerate()

    # ----- chats -----------------------------------------------------------------------------------

    async def action_new_chat(self) -> None:
        await self.when_idle(self._new_chat)

    async def _new_chat(self) -> None:
        await self.start_chat(self.new_conversation())
        self.host.panel.start_chat()
        self.apply_chat_mode()
        self.refresh_settings()
        await self.show_examples()
        self.notify("new chat", timeout=2)

    def action_open_chats(self) -> None:
        self.app.push_screen(ChatsScreen(self.chat.store.list_chats()), self._open_chat)

    async def _open_chat(self, chat_id: int | None) -> None:
        if chat_id is None:
            return

        async def reopen() -> None:
            self.cancel_edit()
            await self.show_conversation(Conversation.open(self.chat.store, chat_id,
                                                           self.host.pair.options.chat_settings()))

        await self.when_idle(reopen)

    # ----- the example openings --------------------------------------------------------------------

    async def show_examples(self) -> None:
        """On an empty chat: what a built-in demo pair is; in completion mode, what a base model
        does, and openings to start from."""
        for old in [*self.query(ExampleOpenings), *self.query(".welcome")]:
            await old.remove()
        if self.chat.conversation.messages:
            return
        if line := welcome(self.host.pair.options.pair_name):
            await self.log_view.add(NoteMessage(line, "info welcome"))
        if self.chat.mode == "completion":
            await self.log_view.add(ExampleOpenings(id="examples"))

    def action_examples(self) -> None:
        examples = self.query(ExampleOpenings)
        if examples:
            examples.first().focus_next_example()
        else:
            self.notify("example openings are offered for a base model (completion mode) on a new chat")

    async def on_example_openings_picked(self, message: ExampleOpenings.Picked) -> None:
        await self.submit(message.text)

    # ----- settings, thinking ----------------------------------------------------------------------

    def action_settings(self) -> None:
        conversation = self.chat.conversation
        screen = SettingsScreen(conversation.settings, conversation.system, self.chat.mode,
                                self.thinking_switch(), self.host.pair.recommended_sampling)  # type: ignore[arg-type]
        self.app.push_screen(screen, self._apply_settings)

    async def _apply_settings(self, result: SettingsResult | None) -> None:
        if result is None:
            return
        conversation = self.chat.conversation
        system_changed = (result.system or None) != conversation.system
        mode = result.mode
        loaded = self.host.pair.session.chat_format
        if loaded is not None:
            mode = loaded.switched(mode).mode
        self.update_chat(settings=result.settings, system=result.system, mode=mode)
        self.apply_chat_mode()
        self.refresh_settings()
        await self.show_examples()
        said = f"settings saved, from the next reply: {self.settings_line()}"
        if system_changed:
            said += f"; system prompt: {result.system}" if result.system else "; no system prompt"
        self.notify(said, timeout=6)
        await self.note(said)

    def action_toggle_thinking(self) -> None:
        switch = self.thinking_switch()
        settings: ChatSettings = self.chat.conversation.settings
        if switch == "enable_thinking":
            settings = settings.model_copy(update={"thinking": not settings.thinking})
            said = f"thinking {'on' if settings.thinking else 'off'}, from the next reply"
        elif switch == "reasoning_effort":
            effort = EFFORTS[(EFFORTS.index(settings.reasoning_effort) + 1) % len(EFFORTS)]
            settings = settings.model_copy(update={"reasoning_effort": effort})
            said = f"reasoning effort {effort}, from the next reply"
        else:
            self.notify("this model's chat template has no thinking switch (enable_thinking or reasoning_effort)")
            return
        self.update_chat(settings=settings)
        self.refresh_settings()
        self.notify(said, timeout=3)

    # ----- copy, export ----------------------------------------------------------------------------

    def chosen_reply(self) -> AssistantMessage | None:
        """The reply that has the focus (clicked, or reached with Tab), else the last one."""
        node: DOMNode | None = self.app.focused
        while node is not None and not isinstance(node, AssistantMessage):
            node = node.parent
        return node if isinstance(node, AssistantMessage) else self.log_view.last_reply()

    def on_key(self, event: events.Key) -> None:
        """Typing while a reply has the focus (picked for F9 with a click or Tab) goes on in the
        message box, as if the focus had never left it."""
        if event.is_printable and event.character and isinstance(self.app.focused, AssistantMessage):
            event.stop()
            self.prompt.focus()
            self.prompt.insert(event.character)

    def action_copy_reply(self) -> None:
        reply = self.chosen_reply()
        if reply is None or not reply.text.strip():
            self.notify("no reply to copy yet")
            return
        text = reply.text.strip("\n")
        self.app.copy_to_clipboard(text)
        self.notify(f"reply copied to the clipboard ({plural(len(text), 'character')}; "
                    "through the terminal, OSC 52)", timeout=4)

    async def action_export(self, fmt: str = "md") -> None:
        from spectui import export, paths

        chat_id = self.chat.conversation.chat_id
        if chat_id is None or not self.chat.conversation.messages:
            self.notify("nothing to export yet: send a message first")
            return
        kind: export.Format = "json" if fmt == "json" else "md"
        try:
            text = export.render(export.read_chat(self.chat.store, chat_id), kind)
            try:
                where = export.write_unused(text, chat_id, kind, self.chat.export_dir)
            except SpectuiError:  # the current directory is not writable: spectui's own
                folder = paths.data_dir() / "exports"
                folder.mkdir(parents=True, exist_ok=True)
                where = export.write_unused(text, chat_id, kind, folder)
        except (SpectuiError, OSError) as error:
            self.notify(f"export failed: {error}", severity="error", timeout=10)
            await self.note(f"export failed: {error}", "error")
            return
        usual = export.default_path(chat_id, kind, where.parent)
        kept = f" ({usual.name} already exists and was kept)" if where != usual.resolve() else ""
        self.notify(f"chat exported to {where}{kept}", timeout=8)
        await self.note(f"chat exported to {where}{kept}")
