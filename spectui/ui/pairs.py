"""The pair picker: a command-palette provider listing catalog pairs with pulled status and size.

Choosing a pulled pair loads it; choosing one that is not pulled downloads it in the app (the
same pull code as `spectui pull`, progress in the status bar), checks it, then loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from rich.text import Text
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape

from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from spectui.catalog import PairStatus


def pair_display(pair: PairStatus) -> Text:
    status = ("pulled", "green") if pair.pulled else ("not pulled: choose to download", "yellow")
    text = Text(f"pair {pair.name}  ")
    text.append(f"{pair.size_gb:.1f} GB  ", style="dim")
    text.append(status[0], style=status[1])
    return text


class PairCommands(Provider):
    """`pair NAME` entries; selecting one calls the app's `choose_pair`."""

    async def startup(self) -> None:
        from spectui.catalog import list_pairs

        try:
            self.pairs: list[PairStatus] = await asyncio.to_thread(list_pairs)
        except (SpectuiError, OSError) as error:  # a damaged record or catalog: say so, list nothing
            self.pairs = []
            self.app.notify(str(error), severity="error", markup=False)

    def _command(self, pair: PairStatus) -> Callable[[], None]:
        return partial(self.app.choose_pair, pair.name, pair.pulled)  # type: ignore[attr-defined]

    async def discover(self) -> Hits:
        for pair in self.pairs:
            yield DiscoveryHit(pair_display(pair), self._command(pair), text=f"pair {pair.name}",
                               help=escape(pair.description))  # help is markup; a description is text

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for pair in self.pairs:
            label = f"pair {pair.name}"
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), self._command(pair), text=label,
                          help=f"{pair.size_gb:.1f} GB · {'pulled' if pair.pulled else 'not pulled'}"
                          f" · {escape(pair.description)}")
