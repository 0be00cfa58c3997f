"""Tool calls in a model's own syntax: which syntax a chat template teaches, and reading calls
back out of what the model wrote.

A chat template that supports tools renders the request's `tools` into the prompt and tells the
model how to call one; the reply then holds the call in that family's syntax. The syntax is read
from the template's source, as llama.cpp detects it (`common_chat_templates_apply_jinja`,
common/chat.cpp: one marker string per family):

- `hermes`: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` (Qwen 2.5, Qwen 3,
  Hermes, SmolLM3); the same tags around Qwen3-Coder's XML, `<function=NAME><parameter=P>\\nV\\n
  </parameter></function>` (`qwen-xml`: Qwen3-Coder, Qwen 3.5 and 3.6).
- `llama3`: a bare `{"name": ..., "parameters": {...}}` (Llama 3.1, 3.2, 3.3), after an optional
  `<|python_tag|>`.
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": ...}]` (Nemo) or `[TOOL_CALLS]NAME[ARGS]{...}`
  (Small 3.2, Devstral, Ministral 3; `[CALL_ID]id` between them where the template has it).
- `gemma4`: `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>` (Gemma 4; Gemma 3's
  template has no tool syntax).
- `lfm2`: `<|tool_call_start|>[name(key="v", n=1)]<|tool_call_end|>` (LiquidAI LFM2, LFM2.5).
- `harmony`: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}` (gpt-oss),
  ended by `<|call|>`, an end-of-generation token.

A template that never reads `tools` (SmolLM2's, Gemma 3's) has none: `tool_syntax` returns None and
the server refuses `tools` naming the template. Markers that are control tokens (`[TOOL_CALLS]`,
`<|python_tag|>`, Gemma's and LFM2's) are rendered as text for a reply that may call a tool
(`ToolSyntax.shown`), as llama-server keeps its `preserved_tokens`.
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


@dataclass(frozen=True)
class ToolSyntax:
    """One family's call syntax."""

    name: str
    openings: tuple[str, ...]
    """Texts that start a call in the reply (a stream holds back what may become one)."""
    shown: tuple[str, ...] = ()
    """Control tokens the reply must show as text for its calls to be read."""
    xml_arguments: bool = False
    """`qwen-xml`: arguments are `<parameter=...>` blocks, not JSON."""
    reads_raw: bool = False
    """`harmony`: calls are read from the whole reply, channels included."""
    prefix_only: bool = False
    """`llama3`: a call is the whole reply, not a tagged block within it."""

    def parse(self, text: str, final: bool = True, types: ParamTypes | None = None) -> Parsed:
        """The calls in `text`; `final` False: a call not yet closed is reported as `open`, not
        read (a stream waits for the rest). Raises `ToolCallError` for a closed call that does
        not parse."""
        parser = PARSERS[self.name]
        return parser(text, final, types or {})

    def find_opening(self, text: str) -> int:
        """Where the first call starts in `text` (-1: none)."""
        if self.prefix_only:
            stripped = text.lstrip()
            if stripped.startswith((PYTHON_TAG, '{"name"', "{\"name\"", "{ \"name\"")):
                return len(text) - len(stripped)
            return -1
        found = [i for i in (text.find(o) for o in self.openings) if i >= 0]
        return min(found, default=-1)

    def held_back(self, text: str) -> int:
        """How many characters at the end of `text` may be the start of an opening."""
        if self.prefix_only:
            stripped = text.lstrip()
            return len(text) if stripped and any(o.startswith(stripped[:len(o)]) for o in self.openings) else 0
        best = 0
        for opening in self.openings:
            for n in range(min(len(opening) - 1, len(text)), 0, -1):
                if text.endswith(opening[:n]):
                    best = max(best, n)
                    break
        return best


def tool_syntax(template: str | None) -> ToolSyntax | None:
    """The call syntax `template` teaches, or None when it has none (it never reads `tools`)."""
    if not template or "tools" not in template:
        return None
    if "<|channel|>" in template:
        return SYNTAXES["harmony"]
    if "<|tool_call>" in template:
        return SYNTAXES["gemma4"]
    if MISTRAL_OPEN in template:
        return SYNTAXES["mistral" if "[ARGS]" in template else "mistral-list"]
    if "<|tool_call_start|>" in template or "List of tools:" in template:
        return SYNTAXES["lfm2"]
    if HERMES_OPEN in template and "<function=" in template:
        return SYNTAXES["qwen-xml"]
    if HERMES_OPEN in template:
        return SYNTAXES["hermes"]
    if PYTHON_TAG in template or '"parameters": dictionary of argument name' in template:
        return SYNTAXES["llama3"]
    return None


# ----- the parsers ------------------------------------------------------------------------------


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
SYNTAXES = {
    "hermes": ToolSyntax("hermes", (HERMES_OPEN,)),
    "qwen-xml": ToolSyntax("qwen-xml", (HERMES_OPEN,), xml_arguments=True),
    "llama3": ToolSyntax("llama3", (PYTHON_TAG, '{"name"'), shown=(PYTHON_TAG,), prefix_only=True),
    "mistral": ToolSyntax("mistral", (MISTRAL_OPEN,), shown=(MISTRAL_OPEN, "[ARGS]", "[CALL_ID]")),
    "mistral-list": ToolSyntax("mistral-list", (MISTRAL_OPEN,), shown=(MISTRAL_OPEN,)),
    "gemma4": ToolSyntax("gemma4", (GEMMA_OPEN,), shown=(GEMMA_OPEN, GEMMA_CLOSE, GEMMA_QUOTE)),
    "lfm2": ToolSyntax("lfm2", (LFM_OPEN,), shown=(LFM_OPEN, LFM_CLOSE)),
    "harmony": ToolSyntax("harmony", (HARMONY_OPEN,), reads_raw=True),
}


def raw_arguments(syntax: ToolSyntax, text: str, n: int) -> tuple[str, str] | None:
    """The `n`th call's name and its arguments as written so far (a prefix of what the call will
    hold, so a stream can send them as they come), for the families whose arguments are a JSON
    object; None while its name is not written yet, or for other families."""
    if syntax.name in ("hermes", "mistral"):
        opening, closing = (HERMES_OPEN, HERMES_CLOSE) if syntax.name == "hermes" else (MISTRAL_OPEN, MISTRAL_OPEN)
        parts = text.split(opening)
        if len(parts) < n + 2:
            return None
        body = parts[n + 1].split(closing)[0]
    elif syntax.name == "llama3" and n == 0:
        body = text.strip().removeprefix(PYTHON_TAG)
    else:
        return None
    if syntax.name == "mistral":
        name, sep, args = body.partition("[ARGS]")
        name = name.partition("[CALL_ID]")[0].strip()
        if not sep or not name:
            return None
    else:
        named = re.search(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
        keyed = re.search(r'"(?:arguments|parameters)"\s*:\s*', body)
        if named is None or keyed is None or keyed.start() < named.end():
            return None
        name, args = json.loads(f'"{named.group(1)}"'), body[keyed.end():]
    return (name, _object_prefix(args)) if args.startswith("{") else None


def _object_prefix(text: str) -> str:
    """`text` up to the end of the JSON object it starts with (all of it while still open)."""
    depth, quoted, escaped = 0, False, False
    for i, char in enumerate(text):
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return text[:i + 1]
    return text


def call_text(syntax: ToolSyntax, call: ToolCall) -> str:
    """A call written in `syntax`, for a template that does not render `tool_calls` itself (it
    gets the call back in the assistant message's content, as the model wrote it)."""
    args = json.loads(call.arguments or "{}")
    if syntax.name == "lfm2":
        kwargs = ", ".join(f"{k}={v!r}" for k, v in args.items())
        return f"{LFM_OPEN}[{call.name}({kwargs})]{LFM_CLOSE}"
    if syntax.name == "llama3":
        return json.dumps({"name": call.name, "parameters": args}, ensure_ascii=False)
    if syntax.name == "mistral":
        return f"{MISTRAL_OPEN}{call.name}[ARGS]{json.dumps(args, ensure_ascii=False)}"
    if syntax.name == "mistral-list":
        return MISTRAL_OPEN + json.dumps([{"name": call.name, "arguments": args}], ensure_ascii=False)
    return f"{HERMES_OPEN}\n{json.dumps({'name': call.name, 'arguments': args}, ensure_ascii=False)}\n{HERMES_CLOSE}"
