"""Keep llama.cpp's log off the terminal (it would tear through the Textual screen) but at hand.

llama-cpp-python's own log callback maps llama.cpp's log levels with an outdated table (it
prints warnings as errors), so we install our own: every line goes into a small ring buffer
(kept for a debugger or a crash log), and `SPECTUI_LLAMA_LOG=1` prints them all.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections import deque

import llama_cpp

from spectui.safe_text import block

# ggml's enum ggml_log_level today: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5.
LEVEL_CONT = 5

_lines: deque[tuple[int, str]] = deque(maxlen=200)
_written = 0
"""Lines written since start (the ring buffer keeps the last 200 of them)."""
_last_level = 0
_echo = os.environ.get("SPECTUI_LLAMA_LOG") == "1"


def _log_line(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _last_level, _written
    if level == LEVEL_CONT:
        level = _last_level
    _last_level = level
    message = text.decode("utf-8", errors="replace")
    _lines.append((level, message))
    _written += 1
    if _echo:
        print(block(message), end="", file=sys.stderr, flush=True)  # it quotes GGUF metadata


_on_log = llama_cpp.llama_log_callback(_log_line)
"""`_log_line` as the C callback llama.cpp calls (module-level: it must outlive every call)."""


def install() -> None:
    llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))


def mark() -> int:
    """A position in the log: `since(mark())` later gives what llama.cpp said in between."""
    return _written


def since(position: int) -> list[str]:
    """The lines written since `position` (those still in the ring buffer), oldest first."""
    fresh = min(_written - position, len(_lines))
    return [text for _, text in list(_lines)[len(_lines) - fresh:]] if fresh > 0 else []
