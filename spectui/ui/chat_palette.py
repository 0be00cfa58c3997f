"""The chat's own entries in the command palette (ctrl+p): every chat action, with its key."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from spectui.ui.core import AppCore

CHAT_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("edit last message", "edit_last", "↑ in an empty message box: change it and resend"),
    ("regenerate reply", "regenerate", "ctrl+r: a new reply in place of the last one"),
    ("copy reply", "copy_reply", "F9: the focused reply, else the last, to the clipboard"),
    ("export chat as Markdown", "export('md')", "F10: a .md file in the current directory"),
    ("export chat as JSON", "export('json')", "everything stored, as a .json file"),
    ("chat settings", "settings", "ctrl+s: system prompt, temperature, top-p, top-k, min-p, max tokens, seed"),
    ("thinking on/off", "toggle_thinking", "ctrl+t: for templates that take enable_thinking or reasoning_effort"),
)
"""(label, the chat pane's action, help) of each entry."""


class ChatCommands(Provider):
    """Runs the chat pane's actions (`ChatPane`, where their keys are bound) by name."""

    def _command(self, action: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await self.app.run_action(action, cast("AppCore", self.app).chat_pane)

        return run

    async def discover(self) -> Hits:
        for label, action, help_text in CHAT_COMMANDS:
            yield DiscoveryHit(label, self._command(action), text=label, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, action, help_text in CHAT_COMMANDS:
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), self._command(action), text=label, help=help_text)
