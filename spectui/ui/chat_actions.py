"""What the app does with whole chats: show and resume them (with the models and mode they were
recorded with), their settings screen, thinking on/off, copy a reply, export. Mixed into
`SpectuiApp`.

`--resume` without models named on the command line reopens the last chat with the pair it last
ran with (a catalog pair by name, other models by their files); when that pair is not available
any more, one line says why and the chat continues with the pair the command line resolved.
A chat's mode (chat or completion) comes back with it unless `--mode` was given.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events
from textual.dom import DOMNode

from spectui.chat.chat_settings import EFFORTS, ChatSettings
from spectui.chat.conversation import Conversation
from spectui.engine.drafters.spec import DrafterSpec
from spectui.errors import SpectuiError
from spectui.session.figures import plural
from spectui.session.options import ChatOptions
from spectui.ui.chat_view import AssistantMessage
from spectui.ui.core import AppCore
from spectui.ui.settings_screen import SettingsResult, SettingsScreen

CUSTOM = "custom"
"""The pair name of models given as files (`--target`/`--draft`), not a catalog pair."""


def recorded_options(options: ChatOptions, pair: str, models: dict[str, Any]) -> tuple[ChatOptions | None, str]:
    """The options to reopen a chat with its recorded models: (options, "") when they differ
    from `options` and are available, (None, why) when they are not, (None, "") when the chat
    runs with `options` anyway (the same models, or none recorded)."""
    name = str(models.get("pair") or pair or "")
    target = models.get("target")
    if not name and not target:
        return None, ""
    if name == options.pair_name and (name != CUSTOM or str(options.target) == target):
        return None, ""
    kind = str(models.get("drafter") or options.drafter.kind)
    if name and name != CUSTOM:
        from spectui.catalog import resolve_pair

        try:
            resolved = resolve_pair(name)
        except SpectuiError as error:
            return None, unavailable(f"pair {name}", str(error), options)
        from spectui.session.options import for_pair

        return for_pair(options, name, resolved.target, resolved.draft, kind, resolved.recommended_k), ""
    if not target:
        return None, ""
    target_path = Path(str(target))
    draft_path = Path(str(models["draft"])) if models.get("draft") else None
    files = [target_path, *([draft_path] if draft_path else [])]
    if (missing := next((f for f in files if not f.is_file()), None)) is not None:
        from spectui.session.options import models_label

        named = models_label(target_path, draft_path)
        return None, unavailable(named, f"{missing} is not there any more", options)
    spec = DrafterSpec(kind, draft_path, options.drafter.draft_n_gpu_layers)
    return replace(options, pair_name=CUSTOM, target=target_path, drafter=spec, rpc=options.rpc_named), ""


def unavailable(what: str, why: str, options: ChatOptions) -> str:
    return (f"this chat was recorded with {what}, which is not available now ({why}); "
            f"it continues with {options.models_label}")


class ChatActions(AppCore):
    """Whole chats: shown, resumed, their settings, copied, exported. Changes `app.chat` through
    the chat pane's methods."""

    if TYPE_CHECKING:  # the other parts' own, declared for the type checker only: at run time
        # nothing here may shadow them (the parts come before their owners in the app's MRO)
        async def show_examples(self) -> None: ...

    # ----- showing chats -----------------------------------------------------------------------

    async def show_conversation(self, conversation: Conversation) -> None:
        """Show a stored conversation (resume, or picked from the list) in its mode and settings."""
        await self.chat_pane.show_conversation(conversation, self.pair.options.show_timings)
        self.apply_chat_mode()
        self.refresh_settings()

    def chat_mode(self, conversation: Conversation) -> str:
        """The mode this chat runs in with the loaded model: its own unless `--mode` was given."""
        loaded = self.pair.session.chat_format
        if loaded is None:
            return conversation.mode or self.chat.mode
        if conversation.mode and not self.pair.options.mode_named:
            return loaded.switched(conversation.mode).mode
        return self.pair.loaded_mode or loaded.mode

    def apply_chat_mode(self) -> None:
        if self.pair.session.chat_format is not None:
            self.chat_pane.set_mode(self.chat_mode(self.chat.conversation))
            self.sub_title = self.subtitle(self.pair.options)

    async def resume_last_chat(self) -> None:
        chat_id = self.chat.store.last_chat_id()
        if chat_id is None:
            await self.note("no saved chat to resume: this is a new one")
            return
        conversation = Conversation.open(self.chat.store, chat_id, self.pair.options.chat_settings())
        await self.show_conversation(conversation)
        if self.pair.options.models_named:
            return
        options, line = recorded_options(self.pair.options, conversation.pair, conversation.models)
        if options is not None:
            self.engine.use_options(options)
            await self.note(f"resumed with the models this chat was recorded with: {options.models_label}")
        elif line:
            self.notify(line, severity="warning", timeout=12)
            await self.note(line, "warning")

    def new_conversation(self) -> Conversation:
        """A new chat, with the settings and system prompt of the one it replaces."""
        old = self.chat.conversation
        return Conversation(self.chat.store, self.pair.options.pair_name, old.system, old.settings)

    # ----- settings, thinking ------------------------------------------------------------------

    def settings_line(self) -> str:
        settings = self.chat.conversation.settings
        line = settings.describe(self.pair.recommended_sampling)
        switch = self.thinking_switch()
        if switch == "enable_thinking":
            line += f" · thinking {'on' if settings.thinking else 'off'}"
        elif switch == "reasoning_effort":
            line += f" · effort {settings.reasoning_effort}"
        return line

    def refresh_settings(self) -> None:
        self.panel.show_settings(self.settings_line())

    def thinking_switch(self) -> str | None:
        loaded = self.pair.session.chat_format
        return loaded.switched(self.chat.mode).thinking_switch if loaded is not None else None

    def action_settings(self) -> None:
        conversation = self.chat.conversation
        screen = SettingsScreen(conversation.settings, conversation.system, self.chat.mode,
                                self.thinking_switch(), self.pair.recommended_sampling)  # type: ignore[arg-type]
        self.push_screen(screen, self._apply_settings)

    async def _apply_settings(self, result: SettingsResult | None) -> None:
        if result is None:
            return
        conversation = self.chat.conversation
        system_changed = (result.system or None) != conversation.system
        mode = result.mode
        if self.pair.session.chat_format is not None:
            mode = self.pair.session.chat_format.switched(mode).mode
        self.chat_pane.update_chat(settings=result.settings, system=result.system, mode=mode)
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
        self.chat_pane.update_chat(settings=settings)
        self.refresh_settings()
        self.notify(said, timeout=3)

    # ----- copy, export ------------------------------------------------------------------------

    def chosen_reply(self) -> AssistantMessage | None:
        """The reply that has the focus (clicked, or reached with Tab), else the last one."""
        node: DOMNode | None = self.focused
        while node is not None and not isinstance(node, AssistantMessage):
            node = node.parent
        return node if isinstance(node, AssistantMessage) else self.log_view.last_reply()

    def on_key(self, event: events.Key) -> None:
        """Typing while a reply has the focus (picked for F9 with a click or Tab) goes on in the
        message box, as if the focus had never left it."""
        if event.is_printable and event.character and isinstance(self.focused, AssistantMessage):
            event.stop()
            self.prompt.focus()
            self.prompt.insert(event.character)

    def action_copy_reply(self) -> None:
        reply = self.chosen_reply()
        if reply is None or not reply.text.strip():
            self.notify("no reply to copy yet")
            return
        text = reply.text.strip("\n")
        self.copy_to_clipboard(text)
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

