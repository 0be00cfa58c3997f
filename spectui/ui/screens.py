"""Past chats: a modal list; choosing one reopens it in the main screen."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from spectui.chat.store import ChatSummary
from spectui.safe_text import line
from spectui.session.figures import plural


def chat_label(chat: ChatSummary) -> str:
    when = chat.updated_at[:16].replace("T", " ")
    title = " ".join(chat.title.split()) or "(empty chat)"
    messages = plural(chat.n_messages, "message")
    return line(f"{title}  ·  {chat.pair or '?'}  ·  {messages}  ·  {when}  ·  chat {chat.id}")


class ChatsScreen(ModalScreen[int | None]):
    """Returns the chosen chat's id, or None when dismissed with Escape."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss_none", "Close")]

    def __init__(self, chats: list[ChatSummary]) -> None:
        super().__init__()
        self.chats = chats

    def compose(self) -> ComposeResult:
        with Vertical(id="chats-dialog"):
            yield Label("Past chats (Enter opens, Escape closes)", id="chats-title")
            # a Text prompt: a title is what the user typed, never markup ("[/b]" must not crash)
            options = [Option(Text(chat_label(chat)), id=str(chat.id)) for chat in self.chats]
            yield OptionList(*options, id="chats-list")
            if not self.chats:
                yield Label("no saved chats yet", classes="note")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
