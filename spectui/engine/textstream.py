"""Turn token bytes into streamed text: whole UTF-8 characters only, stop strings held back.

A token may end in the middle of a multi-byte character; the incremental decoder keeps the
partial bytes until the character completes (a reply that ends first leaves them out). Bytes
that can never be UTF-8 become U+FFFD. Text that could be the start of a stop string is
held back until it either completes the stop string (the reply ends before it) or cannot.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from spectui.engine.events import TARGET, TextPiece


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._text = ""
        self._sources: list[tuple[int, str]] = []  # (end offset in _text, origin)
        self._emitted = 0
        self.stopped = False

    @property
    def text(self) -> str:
        """Everything emitted so far (after a stop: the text before the stop string)."""
        return self._text[: self._emitted]

    def feed(self, data: bytes, origin: str = TARGET) -> list[TextPiece]:
        """Add one token's bytes; return the pieces that are now safe to show."""
        if self.stopped:
            return []
        decoded = self._decoder.decode(data)
        if not decoded:
            return []
        self._text += decoded
        self._sources.append((len(self._text), origin))
        cut = self._find_stop()
        if cut is not None:
            self.stopped = True
            self._text = self._text[:cut]
            return self._emit_until(cut)
        return self._emit_until(len(self._text) - self._held_back())

    def flush(self) -> list[TextPiece]:
        """At the end of a reply: release held-back text. A character the last token only began
        (a reply cut by max_tokens or the context) is left out, not shown as U+FFFD: its bytes
        say nothing yet (llama-server never sends an incomplete character either)."""
        self._decoder.reset()
        return self._emit_until(len(self._text))

    def _find_stop(self) -> int | None:
        # A stop string can only newly appear in the part not yet emitted (plus its own length).
        window = max((len(s) for s in self._stop), default=0)
        start = max(0, self._emitted - window)
        hits = [i for s in self._stop if (i := self._text.find(s, start)) >= 0]
        return min(hits) if hits else None

    def _held_back(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(self._text)), longest, -1):
                if self._text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _emit_until(self, end: int) -> list[TextPiece]:
        pieces: list[TextPiece] = []
        pos = self._emitted
        for source_end, origin in self._sources:
            if source_end <= pos:
                continue
            piece_end = min(source_end, end)
            if piece_end > pos:
                pieces.append(TextPiece(self._text[pos:piece_end], origin))
                pos = piece_end
            if pos >= end:
                break
        self._emitted = max(self._emitted, end)
        self._sources = [(e, d) for e, d in self._sources if e > self._emitted]
        return pieces
