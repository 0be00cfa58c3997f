"""A grammar's size measured before llama.cpp parses it (`engine.step.grammar_bounds`): the upper
bounds it computes, what it refuses, the escapes it writes, and the stack the parse runs on.

The stack is checked where a failure cannot take the test run with it: a child process that
parses a grammar nested deeper than a default thread's stack holds dies of it on such a thread,
and survives on `on_parser_stack`'s."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import spectui
from spectui import limits
from spectui.engine.step import grammar_bounds
from spectui.engine.step.grammar_bounds import GrammarTooLarge, measure


def test_sizes_are_upper_bounds_of_what_the_parser_builds() -> None:
    size, _ = measure('root ::= ("a" | b)* c{2,5}\nb ::= [a-z]\nc ::= "xy"?')
    assert size.depth == 1
    # named: 3; the group: 1; `*`: 1; {2,5}: 3 optional; `?`: 1
    assert size.rules == 9
    nested, _ = measure("root ::= " + "(" * 40 + '"a"' + ")" * 40)
    assert nested.depth == 40 and nested.rules == 41
    repeated, _ = measure('root ::= "abcd"{2000}')
    assert repeated.elements >= 1999 * len('"abcd"')


@pytest.mark.parametrize(("grammar", "said"), [
    ("root ::= " + "(" * (limits.MAX_GRAMMAR_DEPTH + 1) + '"a"' + ")" * (limits.MAX_GRAMMAR_DEPTH + 1),
     "MAX_GRAMMAR_DEPTH"),
    ('root ::= "a"{2001}', "MAX_GRAMMAR_REPEAT"),
    ('root ::= "a"{0,2001}', "MAX_GRAMMAR_REPEAT"),
    ('root ::= "a"{5,3}', "upper bound below"),
    ("root ::= " + ' "a"{0,2000}' * 9, "MAX_GRAMMAR_RULES"),
    ("root ::= " + ' "0123456789"{2000}' * 120, "MAX_GRAMMAR_ELEMENTS"),
    ("root ::= " + '"a" ' * limits.MAX_GRAMMAR_CHARS, "MAX_GRAMMAR_CHARS"),
    ('root ::= "a" \x1b[31m', "control character outside a literal"),
    ('root ::= <\x1b[2J>', "control character outside a literal"),
    ('root ::= "\ud800"', "lone surrogate"),
], ids=lambda value: value if isinstance(value, str) and len(value) < 40 else "")
def test_what_would_overrun_llama_cpp_is_refused_naming_the_limit(grammar, said) -> None:
    with pytest.raises(GrammarTooLarge, match=said):
        measure(grammar)


def test_the_bounds_leave_room_for_the_grammars_the_schema_converter_writes() -> None:
    """A grammar just inside each bound measures inside it (the refusals above are not off by one)."""
    depth = limits.MAX_GRAMMAR_DEPTH
    assert measure("root ::= " + "(" * depth + '"a"' + ")" * depth)[0].depth == depth
    assert measure('root ::= "a"{0,2000} "b"{2000} "c"{2000,}')[0].rules < limits.MAX_GRAMMAR_RULES


def test_raw_control_characters_in_literals_become_escapes_of_the_same_characters() -> None:
    """llama.cpp prints a grammar it cannot parse to stderr whole: no raw escape sequence may reach
    the server's terminal, and the grammar still means the same."""
    _, text = measure('root ::= "\x1b[31m" [\x07\x9b] "ok"')
    assert text == 'root ::= "\\x1b[31m" [\\x07\\u009b] "ok"'
    assert measure('root ::= "tab\tand\nnewline"')[1] == 'root ::= "tab\tand\nnewline"'  # text controls stay
    assert measure('root ::= "a" # \x1b]0;title\x07\n')[1] == 'root ::= "a" # ?]0;title?\n'  # comments mean nothing


def test_on_parser_stack_returns_and_raises_what_its_work_does() -> None:
    assert grammar_bounds.on_parser_stack(lambda: threading.current_thread().name) == "spectui-grammar"
    with pytest.raises(ZeroDivisionError):
        grammar_bounds.on_parser_stack(lambda: 1 // 0)


PARSE = textwrap.dedent("""
    import sys, threading
    import llama_cpp
    from spectui.engine.step import grammar_bounds
    depth, where, model = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    grammar = ("root ::= " + "(" * depth + '"a"' + ")" * depth).encode()
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    vocab = llama_cpp.llama_model_get_vocab(llama_cpp.llama_model_load_from_file(model.encode(), params))
    parse = lambda: bool(llama_cpp.llama_sampler_init_grammar(vocab, grammar, b"root"))
    if where == "default":
        threading.stack_size(8 << 20)  # what Linux gives a thread (ulimit -s)
        thread = threading.Thread(target=parse)
        thread.start()
        thread.join()
        print("parsed")
    else:
        print("parsed" if grammar_bounds.on_parser_stack(parse) else "refused")
""")


def test_the_parser_stack_holds_what_a_default_thread_cannot(tiny_pair) -> None:
    """Nested 40,000 deep (measured: 18,500 end the process on an 8 MiB stack), which the bounds
    never let through: the proof that the bound is needed, and that the parser's stack is larger."""
    def run(where: str) -> subprocess.CompletedProcess[str]:
        here = str(Path(spectui.__file__).parents[1])  # this checkout's spectui, in the child too
        return subprocess.run([sys.executable, "-c", PARSE, "40000", where, str(tiny_pair.target)],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": here})

    assert run("default").returncode < 0  # killed by a signal (SIGSEGV): the stack overflowed
    survived = run("parser")
    assert survived.returncode == 0 and survived.stdout.strip() == "parsed", survived.stderr[-2000:]
