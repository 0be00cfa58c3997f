"""The pair picker: command-palette providers for catalog pairs and for models already on disk.

Choosing a pulled pair loads it; choosing one that is not pulled downloads it in the app (the
same pull code as `spectui pull`, progress in the status bar), checks it, then loads it.
`LocalPairCommands` lists each local model (Ollama, LM Studio, HF cache, config folders) with
its automatic draft (`spectui.catalog.local`); choosing one loads that pair.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.fuzzy import Matcher

from spectui.errors import SpectuiError
from spectui.safe_text import content, line

if TYPE_CHECKING:
    from spectui.catalog import PairStatus
    from spectui.catalog.local import Pairing
    from spectui.ui.core import AppCore


def pair_display(pair: PairStatus) -> Text:
    status = ("pulled", "green") if pair.pulled else ("not pulled: choose to download", "yellow")
    text = Text(f"pair {line(pair.name)}  ")
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
            self.app.notify(str(error), severity="error")

    def _command(self, pair: PairStatus) -> Callable[[], None]:
        return partial(self.app.choose_pair, pair.name, pair.pulled)  # type: ignore[attr-defined]

    async def discover(self) -> Hits:
        for pair in self.pairs:
            yield DiscoveryHit(pair_display(pair), self._command(pair), text=f"pair {pair.name}",
                               help=content(pair.description))  # type: ignore[arg-type]  # Content: not markup

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for pair in self.pairs:
            label = f"pair {pair.name}"
            score = matcher.match(label)
            if score > 0:
                about = f"{pair.size_gb:.1f} GB · {'pulled' if pair.pulled else 'not pulled'} · {pair.description}"
                yield Hit(score, highlight(matcher, label), self._command(pair), text=label,
                          help=content(about))  # type: ignore[arg-type]


def highlight(matcher: Matcher, label: str) -> Content:
    """`matcher.highlight` for a label from outside: Textual's reads the label as markup (a model
    folder named `[/x]` would break it); this shows it as it reads, terminal-safe."""
    shown = line(label)
    plain = content(shown)
    score, offsets = matcher.fuzzy_search.match(matcher.query, shown)
    if not score:
        return plain
    for offset in offsets:
        if not shown[offset].isspace():
            plain = plain.stylize(matcher.match_style, offset, offset + 1)
    return plain


def local_pairings() -> list[Pairing]:
    """Every local model as a target with its automatic drafts (cached: fast after the first)."""
    from spectui.catalog.local import discover, pair_all
    from spectui.catalog.local.index import LocalIndex

    index = LocalIndex()
    try:
        return pair_all(discover(index=index), index)
    finally:
        index.save()


def local_label(pairing: Pairing) -> str:
    best = pairing.best
    return f"local {pairing.target.reference} + {best.model.reference if best else 'no draft'}"


class LocalPairCommands(Provider):
    """`local REF + DRAFT` entries: a model on disk with its best draft; selecting one loads them."""

    async def startup(self) -> None:
        try:
            self.pairings: list[Pairing] = await asyncio.to_thread(local_pairings)
        except SpectuiError as error:
            self.pairings = []
            self.app.notify(str(error), severity="error")

    def _command(self, pairing: Pairing) -> Callable[[], object]:
        from spectui.ui.messages import PairReady

        target, best = pairing.target, pairing.best
        draft = best.model.path if best else None
        drafter = best.model.info.drafter if best else "model"  # eagle3, dflash, dspark, dflash2
        return lambda: cast("AppCore", self.app).engine.post_message(  # the engine host loads it
            PairReady(target.reference, target.path, draft, None, drafter))

    def _help(self, pairing: Pairing) -> str:
        if pairing.best is not None:
            return f"draft {pairing.best.describe()} · {len(pairing.refused)} refused"
        refused = [r for r in pairing.refused if not r.larger]
        return f"no compatible draft on disk ({refused[0].reason})" if refused else "no smaller model on disk"

    async def discover(self) -> Hits:
        for pairing in self.pairings:
            label = local_label(pairing)
            yield DiscoveryHit(content(label), self._command(pairing), text=label,
                               help=content(self._help(pairing)))  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for pairing in self.pairings:
            label = local_label(pairing)
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, highlight(matcher, label), self._command(pairing), text=label,
                          help=content(self._help(pairing)))  # type: ignore[arg-type]
