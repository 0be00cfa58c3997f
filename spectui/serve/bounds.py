"""Bounds on what one request may make `spectui serve` build or hold, checked before the work starts.

A request body is checked twice, both times on the event loop before the request takes a place
in line: as JSON (`check_json`: nesting, how many arrays and objects, no lone surrogate in any
string, since every later step encodes text as UTF-8), and once validated (`check_body`: stop
strings, logit bias entries, messages, the prompt's size against the context, a JSON schema's
counts, a grammar's size). Each refusal names the bound it met (`spectui.limits`), and becomes a
400 with llama-server's error shape. A grammar, given or made from a JSON schema, is measured
again where it is compiled (`engine.step.grammar_bounds`, the one way to llama.cpp's parser).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from spectui import limits
from spectui.engine.step import grammar_bounds
from spectui.serve.schema import ChatRequest, CompletionRequest, Sampling

SCHEMA_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
"""A JSON schema's counts the grammar spells out one item at a time."""
SCHEMA_LISTS = ("enum", "anyOf", "oneOf", "allOf", "prefixItems", "required")
SCHEMA_VALUES = ("const", "enum", "default", "examples")
"""Keys whose values are data, not schemas: their insides are not schema keywords."""
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_BRACES = re.compile(r"\{([^{}]*)\}")


class TooLarge(ValueError):
    """A request past one of the bounds; the message names it (HTTP 400)."""


def check_json(data: object) -> None:
    """Nesting, containers and strings of a parsed body (without recursion: the walk itself
    must not be what a deep body breaks)."""
    containers = 0
    stack: list[tuple[object, tuple[str, ...], int]] = [(data, (), 1)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and _SURROGATE.search(node):
                raise TooLarge(f"{_where(path)} holds a lone surrogate (U+D800..U+DFFF): JSON text must be valid "
                               "Unicode")
            continue
        if not isinstance(node, dict | list):
            continue
        containers += 1
        if depth > limits.MAX_JSON_DEPTH:
            raise TooLarge(f"{_where(path)}: the body nests arrays and objects over {limits.MAX_JSON_DEPTH} deep, "
                           f"the most this server reads (MAX_JSON_DEPTH)")
        if containers > limits.MAX_JSON_CONTAINERS:
            raise TooLarge(f"the body holds over {limits.MAX_JSON_CONTAINERS:,} arrays and objects, the most this "
                           "server reads (MAX_JSON_CONTAINERS)")
        if isinstance(node, dict):
            for key, value in node.items():
                if not key.isascii() and _SURROGATE.search(key):
                    raise TooLarge(f"a key in {_where(path)} holds a lone surrogate (U+D800..U+DFFF): JSON text must "
                                   "be valid Unicode")
                stack.append((value, (*path, _short(key)), depth + 1))
        else:
            stack.extend((value, (*path, str(i)), depth + 1) for i, value in enumerate(node))


def check_body(body: Sampling, n_ctx: int) -> None:
    """What the validated request asks the engine to hold and build."""
    stops = [body.stop] if isinstance(body.stop, str) else body.stop or []
    _at_most(len(stops), limits.MAX_STOP_STRINGS, "stop holds {} strings", "MAX_STOP_STRINGS")
    for i, stop in enumerate(stops):
        _at_most(len(stop), limits.MAX_STOP_CHARS, f"stop[{i}] is {{}} characters long", "MAX_STOP_CHARS")
    _check_bias(body)
    if isinstance(body, ChatRequest):
        _at_most(len(body.messages), limits.MAX_MESSAGES, "messages holds {} messages", "MAX_MESSAGES")
        chars = sum(len(message.reasoning_content or "") + _content_chars(message.content) for message in body.messages)
        _check_prompt_chars("the messages hold", chars, n_ctx)
    elif isinstance(body, CompletionRequest):
        prompt = body.prompt
        chars = len(prompt) if isinstance(prompt, str) else sum(len(p) for p in prompt if isinstance(p, str))
        _check_prompt_chars("the prompt holds", chars, n_ctx)
    if body.grammar is not None:
        try:
            grammar_bounds.check(body.grammar)
        except grammar_bounds.GrammarTooLarge as error:
            raise TooLarge(f"grammar: {error}") from None
    for where, schema in _schemas(body):
        check_schema(schema, where)


def check_tokenize(content: str | list[str | int], n_ctx: int) -> None:
    """/tokenize's content: texts of a context's worth of characters at most, as a prompt's."""
    parts = [content] if isinstance(content, str) else content
    chars = sum(len(part) if isinstance(part, str) else 1 for part in parts)
    _check_prompt_chars("content holds", chars, n_ctx)


def check_token_ids(count: int) -> None:
    """/detokenize's token ids (each is a call into llama.cpp on the engine thread)."""
    _at_most(count, limits.MAX_TOKEN_IDS, "tokens holds {} ids", "MAX_TOKEN_IDS")


def check_schema(schema: object, where: str) -> None:
    """A JSON schema's counts, lists, properties and patterns (the converter to GBNF spells
    each count out, and nests a group per optional item)."""
    stack: list[tuple[object, str]] = [(schema, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, list):
            stack.extend((value, f"{path}.{i}") for i, value in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key in SCHEMA_COUNTS:
            value = node.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                _at_most(value, limits.MAX_SCHEMA_REPEAT, f"{path}.{key} = {{}}", "MAX_SCHEMA_REPEAT")
        for key in SCHEMA_LISTS:
            value = node.get(key)
            if isinstance(value, list):
                _at_most(len(value), limits.MAX_SCHEMA_ENTRIES, f"{path}.{key} holds {{}} entries",
                         "MAX_SCHEMA_ENTRIES")
        properties = node.get("properties")
        if isinstance(properties, dict):
            _at_most(len(properties), limits.MAX_SCHEMA_PROPERTIES, f"{path}.properties holds {{}} properties",
                     "MAX_SCHEMA_PROPERTIES")
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            _check_pattern(pattern, f"{path}.pattern")
        stack.extend((value, f"{path}.{_short(key)}") for key, value in node.items() if key not in SCHEMA_VALUES)


def _check_pattern(pattern: str, where: str) -> None:
    _at_most(len(pattern), limits.MAX_SCHEMA_PATTERN_CHARS, f"{where} is {{}} characters long",
             "MAX_SCHEMA_PATTERN_CHARS")
    for braces in _BRACES.finditer(pattern):  # read as the converter reads {m}, {m,}, {m,n}: int() of each part
        for part in braces.group(1).split(","):
            try:
                count = int(part.strip() or 0)
            except ValueError:
                continue  # the converter refuses it
            _at_most(count, limits.MAX_SCHEMA_REPEAT, f"{where}: the repetition {braces.group()} counts {{}}",
                     "MAX_SCHEMA_REPEAT")


def _schemas(body: Sampling) -> Iterator[tuple[str, dict[str, Any] | bool]]:
    if body.json_schema is not None:
        yield "json_schema", body.json_schema
    fmt = body.response_format
    if fmt is not None and fmt.schema_ is not None:
        yield "response_format.schema", fmt.schema_
    if fmt is not None and fmt.json_schema is not None and fmt.json_schema.schema_ is not None:
        yield "response_format.json_schema.schema", fmt.json_schema.schema_


def _check_bias(body: Sampling) -> None:
    given = body.logit_bias
    if not given:
        return
    _at_most(len(given), limits.MAX_LOGIT_BIAS, "logit_bias holds {} entries", "MAX_LOGIT_BIAS")
    keys = list(given) if isinstance(given, dict) else [entry[0] for entry in given if entry]
    for key in keys:
        if isinstance(key, str):
            _at_most(len(key), limits.MAX_LOGIT_BIAS_TEXT, "a logit_bias text is {} characters long",
                     "MAX_LOGIT_BIAS_TEXT")


def _content_chars(content: object) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part.text or "") for part in content)
    return 0


def _check_prompt_chars(what: str, chars: int, n_ctx: int) -> None:
    if n_ctx <= 0:
        return
    bound = n_ctx * limits.MAX_PROMPT_CHARS_PER_TOKEN
    if chars > bound:
        raise TooLarge(f"{what} {chars:,} characters: more than a {n_ctx:,}-token context can take (at most "
                       f"{bound:,}, {limits.MAX_PROMPT_CHARS_PER_TOKEN} per token: MAX_PROMPT_CHARS_PER_TOKEN)",)


def _at_most(value: float, bound: int, what: str, name: str) -> None:
    """Refuse `value` over `bound`: `what` says what it is, its "{}" standing for the value (the
    rest is never read as a format: it may quote the request)."""
    if value > bound:
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        before, _, after = what.rpartition("{}")
        raise TooLarge(f"{before}{shown}{after}: over {bound:,}, the most this server takes ({name})")


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path) or "the body"


def _short(key: str) -> str:
    """A key as a path shows it: at most 40 characters."""
    return key if len(key) <= 40 else key[:37] + "..."
