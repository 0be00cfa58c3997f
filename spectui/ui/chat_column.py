"""`ChatColumn`, the `#chat-column` as the chat shows it: the status line, the chat log and the
message box, and the state of what they show — the chat (`ChatState`: shown, resumed, its mode
and settings line with the loaded model) and the reply in progress (`ReplyState`) — written here
and in its subclass `ReplyFlow` (`spectui.ui.reply_flow`: the reply flow), nowhere else. The
widget itself is `ChatPane` (`spectui.ui.chat_pane`), their subclass, which holds the chat's keys:
their actions change the state through the methods here and `ReplyFlow`'s.

- A message typed while the models load is queued (shown as such, said in the status line) and
  sent once they are ready; Escape cancels it and gives the text back to the message box.
- Up in an empty message box edits the last message (`ReplyFlow.edit_last`): the turn is marked,
  its text back in the box; Escape cancels.
"""

from __future__ import annotations

from typing import Protocol, cast

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.containers import Vertical

from spectui.chat.chat_settings import ChatSettings
from spectui.chat.conversation import Conversation
from spectui.session.baseline import Baseline
from spectui.session.options import ChatOptions, recorded_options
from spectui.session.reply import ReplyRequest
from spectui.ui.chat_view import AssistantMessage, ChatLog, NoteMessage, UserMessage
from spectui.ui.messages import ReplyPurpose
from spectui.ui.prompt import PromptInput
from spectui.ui.state import ChatState, PairState, QuitState, ReplyState
from spectui.ui.stats_panel import StatsPanel
from spectui.ui.status_line import StatusLine
from spectui.ui.worker_reports import ReplyBatcher


class ReplyEngine(Protocol):
    """What the chat pane asks of the engine host (`EngineHost`; checked where `SpectuiApp`
    joins them): a reply, and the two facts about the pair a reply can learn."""

    def generate_reply(self, request: ReplyRequest, purpose: ReplyPurpose) -> ReplyBatcher:
        """Run the reply in a worker that posts its messages (a failure too) to the pane."""
    def set_baseline(self, measured: Baseline) -> None: ...
    def set_reload_pending(self, pending: bool) -> None: ...
    def use_options(self, options: ChatOptions) -> None:
        """A resumed chat's recorded models: the pair loaded next."""
    def step_k(self, delta: int) -> None:
        """F2/F3 (the draft control is the engine host's)."""
    def toggle_speculation(self) -> None:
        """F4."""
    def next_drafter(self) -> None:
        """F7."""


class ChatHost(Protocol):
    """What the chat pane asks of the app it is in (`SpectuiApp`)."""

    @property
    def pair(self) -> PairState: ...
    @property
    def quit_state(self) -> QuitState: ...
    @property
    def panel(self) -> StatsPanel: ...
    @property
    def engine(self) -> ReplyEngine: ...
    async def reload_first(self, text: str) -> bool:
        """Load the models again first when a fault asks for it (`text` is then queued)."""
    def refresh_subtitle(self) -> None:
        """The header's second line, after the chat's mode changed."""
    def exit(self, result: int | None = None, return_code: int = 0,
             message: RenderableType | None = None) -> None: ...


class ChatColumn(Vertical):
    """Owns `chat` (the conversation shown, its store, mode, colours) and `replies` (the reply in
    progress, the queued message, the edit); the other parts read them through `app.chat` and
    `app.replies`, and change them through the methods here and `ReplyFlow`'s."""

    def __init__(self, chat: ChatState, *, id: str) -> None:
        super().__init__(id=id)
        self.chat = chat
        self.replies = ReplyState()

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status-bar")
        yield ChatLog(id="log")
        yield PromptInput(id="prompt")

    @property
    def host(self) -> ChatHost:
        return cast(ChatHost, self.app)

    @property
    def log_view(self) -> ChatLog:
        return self.query_one("#log", ChatLog)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    @property
    def status_line(self) -> StatusLine:
        return self.query_one("#status-bar", StatusLine)

    async def note(self, text: str, kind: str = "info") -> None:
        await self.log_view.add(NoteMessage(text, kind))

    def set_status(self, text: str, fraction: float | None = None, *, busy: bool = True, bar: bool = True) -> None:
        self.status_line.show(text, fraction, busy=busy, bar=bar)

    def ready_status(self) -> None:
        if self.host.pair.ready and self.replies.busy is None:
            self.set_status(f"ready · {self.host.pair.options.models_label}", busy=False)

    # ----- the chat shown ------------------------------------------------------------------------

    async def start_chat(self, conversation: Conversation) -> None:
        """A new chat in place of the one shown (an empty log)."""
        self.cancel_edit()
        self.chat.conversation = conversation
        await self.log_view.remove_children()

    def update_chat(self, *, settings: ChatSettings | None = None, system: str | None = None,
                    mode: str | None = None) -> None:
        """Change the chat's settings, system prompt or mode (`Conversation.update`: saved)."""
        self.chat.conversation.update(settings=settings, system=system, mode=mode)

    def set_mode(self, mode: str) -> None:
        """How prompts are made for this chat with the loaded model."""
        self.chat.mode = mode

    def toggle_colours(self) -> bool:
        """Replies coloured by who proposed each token, or not (F6); the new setting."""
        self.chat.colouring = not self.chat.colouring
        for message in self.query(AssistantMessage):
            message.set_colouring(self.chat.colouring)
        return self.chat.colouring

    async def show_conversation(self, conversation: Conversation) -> None:
        """Replace the log with a stored conversation (resume, or picked from the list), in its
        mode and settings."""
        self.chat.conversation = conversation
        await self.log_view.show_stored(conversation, self.chat.colouring, self.host.pair.options.show_timings)
        self.apply_chat_mode()
        self.refresh_settings()

    def new_conversation(self) -> Conversation:
        """A new chat, with the settings and system prompt of the one it replaces."""
        old = self.chat.conversation
        return Conversation(self.chat.store, self.host.pair.options.pair_name, old.system, old.settings)

    async def resume_last_chat(self) -> None:
        """`--resume`: the last chat, with the models it was recorded with unless models were
        named (`recorded_options`)."""
        pair = self.host.pair
        chat_id = self.chat.store.last_chat_id()
        if chat_id is None:
            await self.note("no saved chat to resume: this is a new one")
            return
        conversation = Conversation.open(self.chat.store, chat_id, pair.options.chat_settings())
        await self.show_conversation(conversation)
        if pair.options.models_named:
            return
        options, line = recorded_options(pair.options, conversation.pair, conversation.models)
        if options is not None:
            self.host.engine.use_options(options)
            await self.note(f"resumed with the models this chat was recorded with: {options.models_label}")
        elif line:
            self.notify(line, severity="warning", timeout=12)
            await self.note(line, "warning")

    # ----- its mode and settings, with the loaded model ------------------------------------------

    def chat_mode(self, conversation: Conversation) -> str:
        """The mode this chat runs in with the loaded model: its own unless `--mode` was given."""
        pair = self.host.pair
        loaded = pair.session.chat_format
        if loaded is None:
            return conversation.mode or self.chat.mode
        if conversation.mode and not pair.options.mode_named:
            return loaded.switched(conversation.mode).mode
        return pair.loaded_mode or loaded.mode

    def apply_chat_mode(self) -> None:
        if self.host.pair.session.chat_format is not None:
            self.set_mode(self.chat_mode(self.chat.conversation))
            self.host.refresh_subtitle()

    def thinking_switch(self) -> str | None:
        loaded = self.host.pair.session.chat_format
        return loaded.switched(self.chat.mode).thinking_switch if loaded is not None else None

    def settings_line(self) -> str:
        settings = self.chat.conversation.settings
        line = settings.describe(self.host.pair.recommended_sampling)
        switch = self.thinking_switch()
        if switch == "enable_thinking":
            line += f" · thinking {'on' if settings.thinking else 'off'}"
        elif switch == "reasoning_effort":
            line += f" · effort {settings.reasoning_effort}"
        return line

    def refresh_settings(self) -> None:
        self.host.panel.show_settings(self.settings_line())

    async def add_user_turn(self, text: str) -> None:
        """The user's next message, into the chat and the log."""
        self.chat.conversation.add_user(text)
        await self.log_view.add(UserMessage(text, len(self.chat.conversation.messages) - 1))

    async def drop_turns(self, index: int) -> None:
        """Take the turn at `index` and all after it out of the chat, the store and the log."""
        self.replies.editing = None
        self.chat.conversation.truncate(index)
        await self.log_view.remove_from_turn(index)

    # ----- the queued message --------------------------------------------------------------------

    async def queue(self, text: str) -> None:
        """Keep the message until the models are ready (one at a time)."""
        if self.replies.queued is not None:
            self.notify("a message is already waiting for the models (Escape cancels it)")
            return
        self.replies.queued = UserMessage(text, queued=True)
        await self.log_view.add(self.replies.queued)
        self.prompt.clear()
        self.status_line.queued = True
        self.status_line.redraw()

    async def take_queued(self) -> str | None:
        """The queued message's text, taken out of the log (None: nothing was queued)."""
        widget, self.replies.queued = self.replies.queued, None
        self.status_line.queued = False  # said from the next status
        if widget is None:
            return None
        await widget.remove()
        return widget.text

    async def cancel_queued(self, reason: str = "the queued message was cancelled") -> bool:
        """Give the queued text back to the message box; False when nothing was queued."""
        widget, self.replies.queued = self.replies.queued, None
        if widget is None:
            return False
        await widget.remove()
        if not self.prompt.text.strip():
            self.prompt.set_text(widget.text)
        self.status_line.queued = False
        self.status_line.redraw()
        self.notify(f"{reason}: its text is back in the message box", timeout=4)
        return True

    # ----- the turn being edited -----------------------------------------------------------------

    def start_edit(self, index: int) -> None:
        """Put the message at `index` back in the box, marked in the log."""
        self.replies.editing = index
        self.prompt.set_text(self.chat.conversation.messages[index].content)
        self.prompt.focus()
        if (widget := self.log_view.turn_widget(index)) is not None:
            widget.add_class("-editing")

    def end_edit(self) -> bool:
        """Stop editing (the box emptied, the mark gone); False when nothing was edited."""
        if self.replies.editing is None:
            return False
        if (widget := self.log_view.turn_widget(self.replies.editing)) is not None:
            widget.remove_class("-editing")
        self.replies.editing = None
        self.prompt.clear()
        return True

    def cancel_edit(self) -> bool:
        if not self.end_edit():
            return False
        self.ready_status()
        return True
