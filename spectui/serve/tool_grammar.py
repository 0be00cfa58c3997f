"""A GBNF grammar that makes a reply a tool call, in the model's own syntax.

Used where a call is required (`tool_choice: "required"` or one named function): the reply is
constrained from its first token, so even a small model writes a call whose arguments match the
tools' JSON schemas. The arguments' rules come from llama.cpp's JSON-schema converter (the Python
port llama-cpp-python ships, the one `response_format` already uses); around them each family's
markers, as llama.cpp's `common_chat_params` grammars write them (common/chat.cpp). A template
whose reply may open with a `<think>` block keeps it: the grammar lets the thinking come first.

Like every grammar in spectui this stays exact under speculation: drafted tokens are verified
against the target's distribution after the grammar (engine/step/speculative.py). With
`tool_choice: auto` the same grammar is lazy (llama.cpp's, woken by the call's opening token:
`serve.tools.lazy_grammar`): the reply is free until the model opens a call, which then parses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from spectui.chat.tool_calls import ToolSyntax
from spectui.chat.tool_parsers import GEMMA_CLOSE, GEMMA_OPEN, GEMMA_QUOTE, HERMES_CLOSE, HERMES_OPEN, MISTRAL_OPEN

Thinking = Literal["none", "optional", "open"]
"""How a reply may begin: no thinking block, an optional `<think>...</think>` first, or inside one
the prompt opened (its `</think>` still to come)."""

CONSTRAINED = ("hermes", "qwen-xml", "llama3", "mistral", "mistral-list", "gemma4")
"""Families whose required calls get a grammar; the others are read, not constrained."""
LAZY = ("hermes", "qwen-xml", "mistral", "mistral-list", "gemma4")
"""Families whose grammar begins with the call's opening marker: with `auto` it can wait, lazy,
for that marker's token (llama3's call has no marker of its own)."""


@dataclass(frozen=True)
class Function:
    """A tool as the grammar needs it: its name and its parameters' JSON schema."""

    name: str
    parameters: dict[str, Any]


def literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


def until(marker: str) -> str:
    """Any text that does not run into `marker` (then `marker` itself must follow)."""
    parts = []
    for i, char in enumerate(marker):
        prefix = literal(marker[:i]) + " " if i else ""
        parts.append(f"{prefix}[^{_class_char(char)}]")
    return "(" + " | ".join(parts) + ")*"


def _class_char(char: str) -> str:
    return "\\" + char if char in "]\\^-" else ("\\n" if char == "\n" else char)


def call_grammar(syntax: ToolSyntax, functions: list[Function], parallel: bool,
                 thinking: Thinking = "none") -> str | None:
    """The grammar for one call (or, with `parallel`, one or more) to any of `functions`; None
    for a family spectui reads but does not constrain."""
    if syntax.name not in CONSTRAINED or not functions:
        return None
    from llama_cpp import llama_grammar

    converter_class: Any = llama_grammar.SchemaConverter  # (untyped)
    order = {"name": 0, "arguments": 1, "parameters": 1}
    converter = converter_class(prop_order=order, allow_fetch=False, dotall=False, raw_pattern=False)
    rules: dict[str, str] = {}
    alternatives = []
    for i, function in enumerate(functions):
        params = converter.resolve_refs(function.parameters or {"type": "object"}, f"tool{i}")
        alternatives.append(_one_call(syntax, converter, rules, i, function, params))
    rules["call"] = " | ".join(alternatives)
    repeat = f' ("\\n"? {_wrapped(syntax)})*' if parallel and syntax.name != "llama3" else ""
    rules["calls"] = _wrapped(syntax) + repeat
    rules["root"] = _thinking_prefix(thinking) + "calls"
    if thinking != "none":
        rules["think-body"] = until("</think>") + ' "</think>" [ \\n]*'
    for name, rule in rules.items():
        converter._add_rule(name, rule)
    grammar: str = converter.format_grammar()
    return grammar


def _thinking_prefix(thinking: Thinking) -> str:
    if thinking == "open":
        return "think-body "
    if thinking == "optional":
        return '("<think>" think-body)? '
    return ""


def _wrapped(syntax: ToolSyntax) -> str:
    if syntax.name in ("hermes", "qwen-xml"):
        return f'{literal(HERMES_OPEN)} "\\n" call "\\n" {literal(HERMES_CLOSE)}'
    if syntax.name == "gemma4":
        return f"{literal(GEMMA_OPEN)} call {literal(GEMMA_CLOSE)}"
    if syntax.name == "mistral-list":
        return f'{literal(MISTRAL_OPEN)} "[" call "]"'
    if syntax.name == "mistral":
        return f"{literal(MISTRAL_OPEN)} call"
    return "call"  # llama3: the reply is the call


def _one_call(syntax: ToolSyntax, converter: Any, rules: dict[str, str], i: int, function: Function,
              params: dict[str, Any]) -> str:
    """The rule for a call to `function` (its name in rules, or an inline sequence)."""
    name = f"call-{i}"
    if syntax.name in ("hermes", "mistral-list", "llama3"):
        key = "parameters" if syntax.name == "llama3" else "arguments"
        schema = {"type": "object", "properties": {"name": {"const": function.name}, key: params},
                  "required": ["name", key]}
        rule: str = converter.visit(schema, name)
        return rule
    if syntax.name == "mistral":
        args = converter.visit(params, f"{name}-args")
        return f'{literal(function.name)} "[ARGS]" {args}'
    if syntax.name == "qwen-xml":
        names = list((params.get("properties") or {}).keys())
        param = f"{name}-param"
        key = " | ".join(literal(n) for n in names) if names else "[a-zA-Z0-9_]+"
        rules[param] = f'"<parameter=" ({key}) ">\\n" {until(chr(10) + "</parameter>")} "\\n</parameter>\\n"'
        return f'"<function=" {literal(function.name)} ">\\n" {param}* "</function>"'
    # gemma4: call:NAME{key:value,...} with Gemma's strings; keys from the schema
    rules.setdefault("gemma-value", _GEMMA_VALUE)
    rules.setdefault("gemma-string", f"{literal(GEMMA_QUOTE)} {until(GEMMA_QUOTE)} {literal(GEMMA_QUOTE)}")
    names = list((params.get("properties") or {}).keys())
    key = " | ".join(literal(n) for n in names) if names else "[a-zA-Z_] [a-zA-Z0-9_]*"
    pair = f'({key}) ":" gemma-value'
    return f'"call:" {literal(function.name)} "{{" ({pair} ("," {pair})*)? "}}"'


_GEMMA_VALUE = ('gemma-string | "-"? [0-9]+ ("." [0-9]+)? | "true" | "false" | "null" | '
                '"[" (gemma-value ("," gemma-value)*)? "]" | '
                '"{" ([a-zA-Z_] [a-zA-Z0-9_]* ":" gemma-value ("," [a-zA-Z_] [a-zA-Z0-9_]* ":" gemma-value)*)? "}"')
