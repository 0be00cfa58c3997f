"""What a GBNF grammar will make llama.cpp build, measured before llama.cpp sees it.

llama.cpp's grammar parser (`llama_grammar_parser::parse`, src/llama-grammar.cpp) recurses once
per nested group (`parse_sequence` -> `parse_alternates` -> `parse_sequence`), expands every
repetition into rules (`handle_repetitions`: `S{m,n}` copies S m - 1 times and adds n - m rules;
`*`, `+`, `?` one rule each), and `llama_grammar_init_impl` then walks the rules' leftmost
symbols recursively (`llama_grammar_detect_left_recursion`: one C stack frame per rule in a
chain). None of this has a bound of its own except a repetition count's (2000,
`MAX_REPETITION_THRESHOLD`), and a grammar over the C stack ends the process (a stack
overflow, no exception), so `check` measures a grammar's nesting depth, its rules and its
elements from its text alone (an upper bound: no vocabulary, no llama.cpp) and refuses, naming
the limit, what could go past `spectui.limits`'s bounds. `S{m,n}` with n < m is refused too:
llama.cpp computes n - m unsigned, and would add rules until memory runs out.

Those bounds are measured against the stack the parse runs on, and `on_parser_stack` gives it a
known one (`limits.GRAMMAR_STACK_BYTES`) whatever thread compiles the grammar: measured on the
vendored llama.cpp (x86-64, 8 MiB), groups nested 18,500 deep or rules chained 38,000 long end
the process, about 450 and 220 bytes of stack each; the bounds need under 4 MiB (1/16 of the
parser's stack, and half of a default thread's, where the parse runs if no thread can be had).

A grammar that fails to parse is printed whole to stderr by llama.cpp (`fprintf`, not its log),
so the control characters a literal may hold raw are rewritten as the `\\xHH` / `\\uHHHH` escapes
that mean the same character: the server's terminal never receives a request's escape sequences.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from spectui import limits
from spectui.errors import SpectuiError

_TOKEN = re.compile(r'''
    (?P<lit>"(?:[^"\\]|\\.)*"?)         # a literal (unterminated: to the end)
  | (?P<cls>\[(?:[^\]\\]|\\.)*\]?)      # a character class
  | (?P<tok>!?<[^>]*>?)                 # a token, <[id]> or <text>
  | (?P<rep>\{[^}]*\}?)                 # {m}, {m,}, {m,n}
  | (?P<open>\()
  | (?P<close>\))
  | (?P<op>[*+?])
  | (?P<comment>\#[^\r\n]*)
  | (?P<rule>::=)
  | (?P<other>[^"\[<!{()*+?\#:]+|[!:])  # names, spaces, newlines, |, .
''', re.S | re.X)
_REPEAT = re.compile(r"\{[ \t]*([0-9]+)[ \t]*(?:(,)[ \t]*([0-9]*)[ \t]*)?\}")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_STACK_LOCK = threading.Lock()
T = TypeVar("T")


class GrammarTooLarge(SpectuiError):
    """A grammar past one of the bounds (the message names it), refused before llama.cpp."""


@dataclass(frozen=True)
class GrammarSize:
    """Upper bounds of what llama.cpp's parser would build from one grammar's text."""

    depth: int
    """Groups nested in groups, the deepest (the parser's recursion)."""
    rules: int
    """Rules: named, one per group, and those repetitions add."""
    elements: int
    """Symbols in all the rules (each is 8 bytes in llama.cpp)."""


def measure(text: str) -> tuple[GrammarSize, str]:
    """The grammar's size and its text with raw control characters in literals escaped;
    `GrammarTooLarge` for a grammar llama.cpp must not be given."""
    if len(text) > limits.MAX_GRAMMAR_CHARS:
        raise GrammarTooLarge(f"the grammar is {len(text):,} characters long; the most this server takes is "
                              f"{limits.MAX_GRAMMAR_CHARS:,} (MAX_GRAMMAR_CHARS)")
    if _SURROGATE.search(text):
        raise GrammarTooLarge("the grammar holds a lone surrogate (U+D800..U+DFFF): it must be valid Unicode")
    depth = max_depth = 0
    rules, elements = 0, len(text)  # each element of the text's own needs one character at least
    last = 1  # the elements of the symbol a repetition would repeat
    pieces: list[str] = []
    for match in _TOKEN.finditer(text):
        kind, token = match.lastgroup, match.group()
        if kind in ("lit", "cls"):
            last = len(token)
            token = _CONTROL.sub(_escaped, token)
        elif kind == "open":
            depth += 1
            rules += 1
            max_depth = max(max_depth, depth)
        elif kind == "close":
            depth = max(depth - 1, 0)
            last = 1
        elif kind == "rule":
            rules += 1
        elif kind == "op":
            rules += 1
            elements += (2 if token == "+" else 1) * last + 3
        elif kind == "rep":
            added_rules, added = _repetition(token, last, match.start())
            rules += added_rules
            elements += added
        elif kind == "comment":
            token = _CONTROL.sub("?", token)  # a comment means nothing to the parser
        elif (control := _CONTROL.search(token)) is not None:
            raise GrammarTooLarge(f"the grammar holds a control character outside a literal (at character "
                                  f"{match.start() + control.start()}): write it as an escape inside quotes, "
                                  "e.g. \"\\x1b\"")
        if kind in ("other", "tok"):
            last = 1
        pieces.append(token)
    _check(max_depth, rules, elements)
    return GrammarSize(max_depth, rules, elements), "".join(pieces)


def check(text: str) -> str:
    """`measure`'s text (raises `GrammarTooLarge`)."""
    return measure(text)[1]


def _repetition(token: str, last: int, at: int) -> tuple[int, int]:
    """Rules and elements `S{m,n}` adds (llama.cpp's `handle_repetitions`)."""
    parsed = _REPEAT.fullmatch(token)
    if parsed is None:
        return 0, 0  # not a repetition llama.cpp reads: its parser refuses it
    low = int(parsed.group(1))
    high = low if parsed.group(2) is None else (int(parsed.group(3)) if parsed.group(3) else None)
    bound = limits.MAX_GRAMMAR_REPEAT
    if low > bound or (high is not None and high > bound):
        raise GrammarTooLarge(f"the grammar's repetition {token} (at character {at}) goes past {bound:,}, the most "
                              "llama.cpp repeats a symbol (MAX_GRAMMAR_REPEAT); use * or + for no upper bound")
    if high is not None and high < low:
        raise GrammarTooLarge(f"the grammar's repetition {token} (at character {at}) has its upper bound below "
                              "its lower one")
    optional = 1 if high is None else high - low
    return optional, max(low - 1, 0) * last + optional * (last + 3)


def _check(depth: int, rules: int, elements: int) -> None:
    for value, bound, name, what in (
            (depth, limits.MAX_GRAMMAR_DEPTH, "MAX_GRAMMAR_DEPTH", "nests groups {:,} deep"),
            (rules, limits.MAX_GRAMMAR_RULES, "MAX_GRAMMAR_RULES", "makes {:,} rules (named, groups and repetitions)"),
            (elements, limits.MAX_GRAMMAR_ELEMENTS, "MAX_GRAMMAR_ELEMENTS",
             "makes up to {:,} symbols once its repetitions are expanded")):
        if value > bound:
            raise GrammarTooLarge(f"the grammar {what.format(value)}: over {bound:,}, the most this server builds "
                                  f"({name})")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def on_parser_stack(work: Callable[[], T]) -> T:
    """`work`'s result, computed on a thread of its own with `limits.GRAMMAR_STACK_BYTES` of stack
    (the size is process-wide in Python: it is set only while that thread starts)."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as error:  # raised again on the caller's thread
            failed.append(error)

    with _STACK_LOCK:
        try:
            previous = threading.stack_size(limits.GRAMMAR_STACK_BYTES)
        except (ValueError, RuntimeError):  # a platform that cannot size a thread's stack
            return work()
        try:
            thread = threading.Thread(target=run, name="spectui-grammar", daemon=True)
            thread.start()
        except RuntimeError:  # no thread to be had (memory, a process limit): the bounds hold on 8 MiB too
            return work()
        finally:
            threading.stack_size(previous)
    thread.join()
    if failed:
        raise failed[0]
    return done[0]
