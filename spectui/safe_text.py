"""Text from outside, made safe to show on a terminal: the one place that decides what is escaped.

spectui prints names and text it did not write: folder names in Ollama's and LM Studio's stores,
a GGUF's metadata (`general.name`, its chat template's errors), file paths, catalog entries,
chat titles, a model's own output. A terminal obeys control characters wherever they appear, so
such text could set the window title or the colours (`ESC ] 0 ; ... BEL`, `ESC [ 31 m`), write the
clipboard (OSC 52), erase what was printed before it (CR, `ESC [ 2 K`) or make one line look like
another (the bidirectional overrides). Every such string passes through this module first:

- `line(text)`: for a name, a path, an error: every C0 control (U+0000-U+001F, newline, tab and
  CR included), DEL (U+007F), every C1 control (U+0080-U+009F, e.g. CSI U+009B, which some
  terminals take as `ESC [`), and the bidirectional embeddings, overrides and isolates
  (U+202A-U+202E, U+2066-U+2069), the line and paragraph separators (U+2028, U+2029) and lone
  surrogates (U+D800-U+DFFF: a file name's bytes that are not UTF-8, which Python's
  surrogateescape would print back raw, `\\x9b` being CSI to some terminals) are shown as escapes
  (`\\x1b`, `\\n`, `\\u202e`, `\\udc9b`), so the result is one line that only prints.
- `block(text)`: for several lines (a listing, a notice, a reply): the same, except that newline
  and tab are kept, where they lay out the text.
- `content(text)`: for the app, `line` (or `block`) as a Textual `Content`, which no widget parses
  as markup: a model named `[bold red]x` shows those characters, and `[/x]` cannot break the
  markup parser (a `str` given to `Label`, `notify` or a palette hit's help would be parsed).

Nothing else changes: printable Unicode (accents, CJK, emoji) stays as it is. JSON output needs
none of this (`json.dumps` escapes controls itself), and files written for the user (exports) keep
the exact text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.content import Content

KEPT_IN_BLOCKS = "\n\t"
"""The controls `block` leaves alone: they lay out several lines and do nothing else."""

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(text: object) -> str:
    """`text` (any object, as `str()` gives it) as one line with every control shown escaped."""
    return _UNSAFE.sub(lambda match: _escape(match[0]), str(text))


def block(text: object) -> str:
    """`text` as lines: newline and tab kept, every other control shown escaped."""
    return _UNSAFE.sub(lambda m: m[0] if m[0] in KEPT_IN_BLOCKS else _escape(m[0]), str(text))


def content(text: object, *, multiline: bool = False) -> Content:
    """`line(text)` (`block` when `multiline`) as Textual `Content`: shown as it reads, never markup."""
    from textual.content import Content

    return Content(block(text) if multiline else line(text))


def is_safe(text: str, *, multiline: bool = False) -> bool:
    """Whether `text` is already what `line` (or `block`) would make of it."""
    return text == (block(text) if multiline else line(text))
