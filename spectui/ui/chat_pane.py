"""`ChatPane`, the `#chat-column`: the status line, the chat log and the message box, and the
state of what they show — the chat (`ChatState`) and the reply in progress (`ReplyState`).

What happens in the pane is its own: the stored chat drawn into the log, the queued message
(shown, taken, given back), the turn being edited (marked, dropped), the reply's pieces streamed
into their widget and saved as they come, its end. When a reply may start, with what request, and
what the panel and the models do is the app's (`replies.py`, `controls.py`), which calls these.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical

from spectui.chat.conversation import Conversation
from spectui.session.figures import ReplyFigures, meta_line
from spectui.ui.chat_view import AssistantMessage, ChatLog, NoteMessage, UserMessage
from spectui.ui.messages import ReplyPurpose, ReplyUpdate
from spectui.ui.prompt import PromptInput
from spectui.ui.state import ChatState, ReplyState
from spectui.ui.status_line import StatusLine


class ChatPane(Vertical):
    """Owns `chat` (the conversation shown, its store, mode, colours) and `replies` (the reply in
    progress, the queued message, the edit); the app's parts read them through `app.chat` and
    `app.replies`."""

    def __init__(self, chat: ChatState, *, id: str) -> None:  # Textual's own name
        super().__init__(id=id)
        self.chat = chat
        self.replies = ReplyState()

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status-bar")
        yield ChatLog(id="log")
        yield PromptInput(id="prompt")

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

    # ----- the chat shown ------------------------------------------------------------------------

    async def show_conversation(self, conversation: Conversation, show_timings: bool) -> None:
        """Replace the log with a stored conversation (resume, or picked from the list)."""
        self.chat.conversation = conversation
        log = self.log_view
        await log.remove_children()
        if conversation.system:
            await self.note(f"system prompt: {conversation.system}")
        for turn, message in enumerate(conversation.messages):
            if message.role == "user":
                await log.add(UserMessage(message.content, turn))
            elif message.role == "assistant":
                await log.add(self.stored_reply(conversation, turn, show_timings))

    def stored_reply(self, conversation: Conversation, turn: int, show_timings: bool) -> AssistantMessage:
        message, figures = conversation.messages[turn], ReplyFigures.from_stored(conversation.stats(turn))
        meta = ("interrupted (saved before it finished)" if conversation.interrupted(turn)
                else meta_line(figures, show_timings))
        widget = AssistantMessage(message.content, meta=meta, figures=figures, reasoning=message.reasoning, turn=turn)
        widget.set_colouring(self.chat.colouring)
        return widget

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

    # ----- the reply streamed --------------------------------------------------------------------

    async def open_reply(self, title: str) -> AssistantMessage:
        """The widget the next reply streams into, at the end of the log."""
        widget = AssistantMessage(title=title, streaming=True, turn=len(self.chat.conversation.messages))
        self.replies.reply_widget = widget
        await self.log_view.add(widget)
        widget.set_colouring(self.chat.colouring)
        self.chat.conversation.start_reply()
        return widget

    def streamed_widget(self, purpose: ReplyPurpose) -> AssistantMessage | None:
        if purpose == "compare":
            return self.replies.comparison.right if self.replies.comparison else None
        return self.replies.reply_widget

    async def show_pieces(self, message: ReplyUpdate) -> AssistantMessage | None:
        """A batch of the reply's pieces into its widget (the reply's saved as it stands); the
        widget, None when it is gone."""
        widget = self.streamed_widget(message.purpose)
        if widget is not None:
            await widget.append(message.pieces)
        return widget

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
