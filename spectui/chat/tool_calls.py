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

Reading calls back is `chat.tool_parsers` (one parser per family), with the values both share.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from spectui.chat.tool_parsers import (
    GEMMA_CLOSE,
    GEMMA_OPEN,
    GEMMA_QUOTE,
    HARMONY_OPEN,
    HERMES_CLOSE,
    HERMES_OPEN,
    LFM_CLOSE,
    LFM_OPEN,
    MISTRAL_OPEN,
    PARSERS,
    PYTHON_TAG,
    ParamTypes,
    Parsed,
    ToolCall,
)


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
