"""The reply worker's messages and the reply keys, handed to the chat pane (`ChatPane`, which
holds the reply flow: sending, the queued message, editing, regenerating, streaming). Part of
`SpectuiApp`: the worker (`workers.generate_reply`) posts its `ReplyUpdate`s and `ReplyFinished`
to the app, and the keys (Ctrl+R, the palette's "edit last message") are the app's bindings.
"""

from __future__ import annotations

from contextlib import suppress

from textual.css.query import NoMatches

from spectui.ui.core import AppCore
from spectui.ui.messages import ReplyFinished, ReplyUpdate


class Replies(AppCore):
    """Hands the reply worker's messages and the reply keys to the chat pane."""

    async def on_reply_update(self, message: ReplyUpdate) -> None:
        with suppress(NoMatches):  # a batch that arrives as the app closes finds its widgets gone
            await self.chat_pane.show_update(message)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        with suppress(NoMatches):  # the end of a reply that arrives as the app closes: quitting saved it
            await self.chat_pane.show_finished(message)

    async def action_edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        await self.chat_pane.edit_last()

    async def action_regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        await self.chat_pane.regenerate()
