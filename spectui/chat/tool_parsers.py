"""Reading tool calls back out of what a model wrote, one parser per family's syntax (which
family a template teaches, and what else a family needs, is `chat.tool_calls`): the calls in
order and the text outside them; a call not closed yet is reported open (a stream reads on), a
closed one that does not parse raises `ToolCallError`.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from dataclasses import dataclass

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
GEMMA_OPEN, GEMMA_CLOSE, GEMMA_QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
LFM_OPEN, LFM_CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"
MISTRAL_OPEN = "[TOOL_CALLS]"
PYTHON_TAG = "<|python_tag|>"
HARMONY_OPEN = "to=functions."
HARMONY_ENDS = ("<|call|>", "<|end|>", "<|start|>", "<|return|>")


class ToolCallError(ValueError):
    """A call whose text does not parse (its arguments are not JSON, ...)."""


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: the function's name and its arguments as JSON text."""

    name: str
    arguments: str
    id: str = ""


@dataclass(frozen=True)
class Parsed:
    """A reply read for calls: the text outside them, and the calls in order."""

    content: str
    calls: tuple[ToolCall, ...]
    open: bool = False
    """True when the text ends inside a call that is not closed yet (a stream reads on)."""


ParamTypes = dict[str, dict[str, str]]
"""Per function, each parameter's JSON-schema type (`qwen-xml` values are text: this says which
to read as JSON)."""


def _arguments(value: object) -> str:
    """Arguments as JSON text (a model may write them as an object or as a JSON string)."""
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ToolCallError(f"the arguments are not JSON: {text[:80]!r}") from None
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ToolCallError("the arguments are not a JSON object")
    return json.dumps(value, ensure_ascii=False)


def _json_call(body: str, args_key: str = "arguments") -> ToolCall:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        raise ToolCallError(f"a call is not valid JSON ({error.msg} at {error.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ToolCallError("a call has no function name")
    args = data.get(args_key, data.get("arguments", data.get("parameters")))
    return ToolCall(data["name"], _arguments(args), str(data.get("id") or ""))


def _xml_call(body: str, types: ParamTypes) -> ToolCall:
    """`<function=NAME>` `<parameter=P>\\nvalue\\n</parameter>`... `</function>` (Qwen3-Coder)."""
    match = re.match(r"\s*<function=([^>\s]+)>(.*?)(?:</function>\s*)?$", body, re.S)
    if match is None:
        raise ToolCallError("a call has no <function=...> block")
    name, rest = match.group(1), match.group(2)
    kinds = types.get(name, {})
    args: dict[str, object] = {}
    for param, raw in re.findall(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", rest, re.S):
        args[param] = raw
        if kinds.get(param, "string") != "string":
            with contextlib.suppress(json.JSONDecodeError):
                args[param] = json.loads(raw)
    return ToolCall(name, json.dumps(args, ensure_ascii=False))


def _tagged(text: str, final: bool, opening: str, closing: str,
            read: object) -> Parsed:
    """Calls between `opening` and `closing`; the text outside them is the content."""
    content: list[str] = []
    calls: list[object] = []
    position = 0
    while True:
        start = text.find(opening, position)
        if start < 0:
            content.append(text[position:])
            return Parsed("".join(content).strip(), tuple(calls))  # type: ignore[arg-type]
        content.append(text[position:start])
        end = text.find(closing, start + len(opening))
        if end < 0:
            if not final:
                return Parsed("".join(content).strip(), tuple(calls), open=True)  # type: ignore[arg-type]
            calls.append(read(text[start + len(opening):]))  # type: ignore[operator]
            return Parsed("".join(content).strip(), tuple(calls))  # type: ignore[arg-type]
        calls.append(read(text[start + len(opening):end]))  # type: ignore[operator]
        position = end + len(closing)


def parse_hermes(text: str, final: bool, types: ParamTypes) -> Parsed:
    def read(body: str) -> ToolCall:
        return _xml_call(body, types) if body.lstrip().startswith("<function=") else _json_call(body.strip())

    return _tagged(text, final, HERMES_OPEN, HERMES_CLOSE, read)


def parse_llama3(text: str, final: bool, types: ParamTypes) -> Parsed:
    """The whole reply is the call (or several, separated by `;`), after an optional python tag."""
    body = text.strip().removeprefix(PYTHON_TAG).strip()
    if not body.startswith("{"):
        return Parsed(text.strip(), ())
    decoder, position = json.JSONDecoder(), 0
    calls: list[ToolCall] = []
    while position < len(body):
        try:
            data, end = decoder.raw_decode(body, position)
        except json.JSONDecodeError:
            if not final:
                return Parsed("", tuple(calls), open=True)
            raise ToolCallError("a call is not valid JSON") from None
        calls.append(_json_call(json.dumps(data), "parameters"))
        position = end
        while position < len(body) and body[position] in " \n\t;":
            position += 1
    return Parsed("", tuple(calls), open=not final)


def parse_mistral(text: str, final: bool, types: ParamTypes) -> Parsed:
    start = text.find(MISTRAL_OPEN)
    if start < 0:
        return Parsed(text.strip(), ())
    content, rest = text[:start].strip(), text[start:]
    calls: list[ToolCall] = []
    decoder = json.JSONDecoder()
    for piece in rest.split(MISTRAL_OPEN)[1:]:
        piece = piece.strip()
        try:
            if piece.startswith("["):  # Nemo: a JSON list of calls
                data, _end = decoder.raw_decode(piece)
                calls.extend(_json_call(json.dumps(item)) for item in data)
                continue
            name, _sep, args = piece.partition("[ARGS]")
            name, _sep, call_id = name.partition("[CALL_ID]")
            if not _sep and "[ARGS]" not in piece:
                raise json.JSONDecodeError("no [ARGS]", piece, 0)
            data, _end = decoder.raw_decode(args.strip())
            calls.append(ToolCall(name.strip(), _arguments(data), call_id.strip()))
        except (json.JSONDecodeError, TypeError):
            if not final:
                return Parsed(content, tuple(calls), open=True)
            raise ToolCallError("a [TOOL_CALLS] call does not parse") from None
    return Parsed(content, tuple(calls), open=not final)


def gemma_value(text: str) -> object:
    """Gemma 4's argument syntax as a Python value: strings between `<|"|>`, bare keys."""
    out, position = [], 0
    while position < len(text):
        if text.startswith(GEMMA_QUOTE, position):
            end = text.find(GEMMA_QUOTE, position + len(GEMMA_QUOTE))
            if end < 0:
                raise ToolCallError("an argument's string is not closed")
            out.append(json.dumps(text[position + len(GEMMA_QUOTE):end], ensure_ascii=False))
            position = end + len(GEMMA_QUOTE)
            continue
        match = re.match(r"([A-Za-z_][\w.-]*)(\s*:)", text[position:])
        if match and (not out or out[-1].rstrip()[-1:] in "{,"):
            out.append(json.dumps(match.group(1)) + match.group(2))
            position += match.end()
            continue
        out.append(text[position])
        position += 1
    try:
        return json.loads("".join(out))
    except json.JSONDecodeError:
        raise ToolCallError("a call's arguments do not parse") from None


def parse_gemma4(text: str, final: bool, types: ParamTypes) -> Parsed:
    def read(body: str) -> ToolCall:
        match = re.match(r"\s*call:([^{\s]+)\s*(\{.*\})\s*$", body, re.S)
        if match is None:
            raise ToolCallError("a call is not `call:NAME{...}`")
        return ToolCall(match.group(1), _arguments(gemma_value(match.group(2))))

    return _tagged(text, final, GEMMA_OPEN, GEMMA_CLOSE, read)


def parse_lfm2(text: str, final: bool, types: ParamTypes) -> Parsed:
    """A Python list of calls with keyword arguments of literal values."""
    def read(body: str) -> list[ToolCall]:
        try:
            tree = ast.parse(body.strip(), mode="eval").body
            items = tree.elts if isinstance(tree, ast.List) else [tree]
            calls = []
            for item in items:
                if not isinstance(item, ast.Call) or item.args:
                    raise ValueError("not a call with keyword arguments")
                name = ast.unparse(item.func)
                args = {kw.arg: ast.literal_eval(kw.value) for kw in item.keywords if kw.arg}
                calls.append(ToolCall(name, json.dumps(args, ensure_ascii=False)))
            return calls
        except (SyntaxError, ValueError, TypeError) as error:
            raise ToolCallError(f"a call does not parse ({error})") from None

    parsed = _tagged(text, final, LFM_OPEN, LFM_CLOSE, read)
    calls = tuple(call for group in parsed.calls for call in group)  # type: ignore[attr-defined]
    return Parsed(parsed.content, calls, parsed.open)


def parse_harmony(text: str, final: bool, types: ParamTypes) -> Parsed:
    """`to=functions.NAME ... <|message|>ARGS` up to the next header or the end."""
    calls: list[ToolCall] = []
    for match in re.finditer(r"to=functions\.([^\s<]+)[^\n]*?<\|message\|>", text):
        rest = text[match.end():]
        ends = [i for i in (rest.find(e) for e in HARMONY_ENDS) if i >= 0]
        if not ends and not final:
            return Parsed("", tuple(calls), open=True)
        body = rest[:min(ends)] if ends else rest
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            raise ToolCallError("a call's arguments are not JSON") from None
        calls.append(ToolCall(match.group(1), _arguments(data)))
    return Parsed("", tuple(calls))


PARSERS = {"hermes": parse_hermes, "qwen-xml": parse_hermes, "llama3": parse_llama3, "mistral": parse_mistral,
           "mistral-list": parse_mistral, "gemma4": parse_gemma4, "lfm2": parse_lfm2, "harmony": parse_harmony}
