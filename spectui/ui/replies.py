"""The reply worker's messages and the reply keys, handed to the chat pane (`ChatPane`, which
holds the reply flow: sending, the queued message, editing, regenerating, streaming). Part of
`SpectuiApp`: the worker (`EngineHost.generate_reply`) posts its `ReplyUpdate`s, `ReplyFinished`
or `EngineFailed` to the app, in one queue (a failure is seen after the reply's last pieces), and
the keys (Ctrl+R, the palette's "edit last message") are the app's bindings.
"""

from __future__ import annotations

from contextlib import suppress

from textual.css.query import NoMatches

from spectui.ui.core import AppCore
from spectui.ui.messages import EngineFailed, ReplyFinished, ReplyUpdate


class Replies(AppCore):
    """Hands the reply worker's messages and the reply keys to the chat pane (a failure to the
    engine host, which says it and ends the reply)."""

    async def on_reply_update(self, message: ReplyUpdate) -> None:
        with suppress(NoMatches):  # a batch that arrives as the app closes finds its widgets gone
            await self.chat_pane.show_update(message)

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        with suppress(NoMatches):  # the end of a reply that arrives as the app closes: quitting saved it
            await self.chat_pane.show_finished(message)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        """A reply that failed (the loading workers' failures go to the engine host itself)."""
        await self.engine.on_engine_failed(message)

    async def action_edit_last(self) -> None:
        """Put the last message sent back in the box; Enter resends it in place of the old turn."""
        await self.chat_pane.edit_last()

    async def action_regenerate(self) -> None:
        """A new reply in place of the last one (current K, drafter and settings)."""
        await self.chat_pane.regenerate()
