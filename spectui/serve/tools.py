"""Tool calls in `/v1/chat/completions`: the request's `tools` and `tool_choice`, the call
messages of earlier turns, and a reply read back into OpenAI's `tool_calls`, whole or streamed.

`plan` runs on the event loop (it only reads the request and the template's source) and names
the family's syntax (`chat.tool_calls`); `prepare` runs on the engine thread with the reply's other
work: the grammar for a required call (`tool_grammar`) and the control tokens the reply must show.
`tool_choice`:

- `none`: no tools reach the template and the reply is not read for calls (OpenAI: no call).
- `auto` (the default with tools): the template gets them; the reply is read for calls, not
  constrained.
- `required`, or `{"type": "function", "function": {"name": ...}}`: a grammar makes the reply a
  call (to that function), for the families `tool_grammar.CONSTRAINED` lists; others are read.

`parallel_tool_calls` (default true) lets a constrained reply hold more than one call. A streamed
call goes out as OpenAI streams it: a first delta with its index, id, type and name (arguments
empty), then its arguments; the last chunk's finish_reason is `tool_calls` (`length` for a reply cut
by max_tokens or the context, as llama-server says).
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from spectui import limits
from spectui.chat.reasoning import THINK_TAGS
from spectui.chat.template import PromptStyle
from spectui.chat.tool_calls import ToolSyntax, call_text, raw_arguments, tool_syntax
from spectui.chat.tool_parsers import ParamTypes, Parsed, ToolCall, ToolCallError
from spectui.serve import convert
from spectui.serve.convert import Defaults, RequestError
from spectui.serve.tool_grammar import LAZY, Function, Thinking, call_grammar

if TYPE_CHECKING:
    from spectui.chat.template import ChatFormat, ChatMessage
    from spectui.engine.generation_config import SamplingConfig
    from spectui.engine.generator import Generator
    from spectui.serve.schema import ChatRequest
    from spectui.session.reply import ReplyDone, ReplyRequest

ALPHANUMERIC = string.ascii_letters + string.digits


@dataclass(frozen=True)
class ToolPlan:
    """What one request asks of tools, for the loaded template."""

    syntax: ToolSyntax
    tools: tuple[dict[str, Any], ...]
    """The request's tools as the template gets them."""
    functions: tuple[Function, ...]
    """The functions a call may name (all, or the one `tool_choice` names)."""
    required: bool
    parallel: bool
    types: ParamTypes = field(default_factory=dict)
    renders_calls: bool = True
    """False: the template ignores `tool_calls`; earlier calls go back as text in the content."""

    def new_id(self) -> str:
        """A call id: 9 letters and digits for Mistral's templates (they refuse any other), else
        OpenAI's `call_` form."""
        size = 9 if self.syntax.name.startswith("mistral") else 24
        token = "".join(secrets.choice(ALPHANUMERIC) for _ in range(size))
        return token if size == 9 else f"call_{token}"


def plan(body: ChatRequest, chat_format: ChatFormat | None, model: str) -> ToolPlan | None:
    """The request's tool plan (None without tools, or with `tool_choice: none`); `RequestError`
    for tools the template cannot take or a choice that names no tool."""
    tools = list(body.tools or []) or [{"type": "function", "function": f} for f in body.functions or []]
    choice = body.tool_choice if body.tool_choice is not None else body.function_call
    if not tools:
        if choice not in (None, "none", "auto"):
            raise RequestError("tool_choice names a tool, but the request has no tools")
        return None
    if choice == "none":
        return None
    if len(tools) > limits.MAX_TOOLS:
        raise RequestError(f"tools: {len(tools)} tools; the most one request may give is {limits.MAX_TOOLS}")
    if len(json.dumps(tools)) > limits.MAX_TOOLS_BYTES:
        raise RequestError(f"tools: their definitions are over {limits.MAX_TOOLS_BYTES} bytes of JSON")
    functions = [_function(tool, i) for i, tool in enumerate(tools)]
    template = chat_format.template if chat_format is not None and chat_format.mode == "chat" else None
    syntax = tool_syntax(template)
    if syntax is None:
        what = f"the chat template of {model}" if template else f"{model} (it has no chat template)"
        raise RequestError(f"tools: {what} has no tool-call syntax (it never reads `tools`), so this model "
                           "cannot call tools; send the request without `tools`, or serve a model whose "
                           "template supports them (Qwen 2.5/3, Llama 3.1+, Mistral, Gemma 4, gpt-oss, LFM2)")
    required, named = _choice(choice)
    chosen = functions
    if named is not None:
        chosen = [f for f in functions if f.name == named]
        if not chosen:
            raise RequestError(f"tool_choice names {named!r}, which is not among the request's tools")
    parallel = body.parallel_tool_calls if body.parallel_tool_calls is not None else True
    types = {f.name: {k: str(v.get("type", "string")) if isinstance(v, dict) else "string"
                      for k, v in (f.parameters.get("properties") or {}).items()} for f in functions}
    return ToolPlan(syntax, tuple(tools), tuple(chosen), required or named is not None, parallel, types,
                    renders_calls="tool_calls" in (template or ""))


def _function(tool: object, index: int) -> Function:
    where = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise RequestError(f"{where}: only tools of type `function` are supported")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise RequestError(f"{where}.function.name: give the function's name")
    params = function.get("parameters") or {"type": "object"}
    if not isinstance(params, dict):
        raise RequestError(f"{where}.function.parameters: a JSON schema (an object) is expected")
    return Function(function["name"], params)


def _choice(choice: object) -> tuple[bool, str | None]:
    """(required, the one function named) from `tool_choice` (or the legacy `function_call`)."""
    if choice in (None, "auto"):
        return False, None
    if choice == "required":
        return True, None
    if isinstance(choice, dict):
        function = choice.get("function") if "function" in choice else choice
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return True, function["name"]
    raise RequestError(f"tool_choice {json.dumps(choice)[:80]}: use \"none\", \"auto\", \"required\" or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}")


# ----- the engine thread's part --------------------------------------------------------------------


def grammar(tool_plan: ToolPlan, chat_format: ChatFormat, messages: list[ChatMessage],
            style: PromptStyle) -> str | None:
    """The grammar that makes the reply a call, for a required call; None otherwise."""
    if not tool_plan.required:
        return None
    thinking: Thinking = "none"
    if chat_format.markers == THINK_TAGS and THINK_TAGS.open_tag in (chat_format.template or "") and style.thinking:
        thinking = "open" if chat_format.opens_reasoning(messages, style) else "optional"
    try:
        return call_grammar(tool_plan.syntax, list(tool_plan.functions), tool_plan.parallel, thinking)
    except Exception as error:  # the converter raises whatever its schema walk hits
        raise RequestError(f"tools: a function's parameters cannot be turned into a grammar ({error})") from None


def lazy_grammar(tool_plan: ToolPlan, generator: Generator, sampling: SamplingConfig) -> SamplingConfig:
    """For `auto`: the call grammar, lazy, woken by the call's opening token (`<tool_call>`,
    `[TOOL_CALLS]`, `<|tool_call>`), so a call once begun is one that parses; the reply is free
    until then. Only where the opening is one token of the vocabulary (the real Qwen, Mistral and
    Gemma vocabularies have it) and the family's grammar begins with it; elsewhere the reply is
    only read."""
    syntax = tool_plan.syntax
    if syntax.name not in LAZY:
        return sampling
    tokens = generator.target.tokenize(syntax.openings[0], add_special=False, parse_special=True)
    if len(tokens) != 1:
        return sampling
    try:
        gbnf = call_grammar(syntax, list(tool_plan.functions), tool_plan.parallel)
    except Exception:  # a schema the converter cannot take: the reply is read, not constrained
        return sampling
    return replace(sampling, grammar=gbnf, grammar_triggers=(tokens[0],)) if gbnf else sampling


def shown_tokens(tool_plan: ToolPlan, generator: Generator) -> frozenset[int]:
    """The control tokens among the syntax's markers (shown as text so the call can be read)."""
    target = generator.target
    out = set()
    for marker in tool_plan.syntax.shown:
        tokens = target.tokenize(marker, add_special=False, parse_special=True)
        if len(tokens) == 1 and not target.token_bytes(tokens[0]):
            out.add(tokens[0])
    return frozenset(out)


def reply_request(body: ChatRequest, generator: Generator, defaults: Defaults, tool_plan: ToolPlan,
                  chat_format: ChatFormat) -> ReplyRequest:
    """`convert.reply_request`, with the tools given to the template, the calls of earlier turns
    written back the way the template takes them, and a required call's grammar."""
    request = convert.reply_request(body, generator, defaults)
    style = replace(request.style or PromptStyle(), tools=tool_plan.tools)
    messages = list(request.messages)
    if not tool_plan.renders_calls:
        messages = [_calls_as_text(tool_plan, m) if m.tool_calls else m for m in messages]
    gbnf = grammar(tool_plan, chat_format, messages, style)
    if gbnf is not None and request.sampling.grammar is not None:
        raise RequestError("a required tool call and response_format both constrain the reply: give one of them")
    sampling = replace(request.sampling, grammar=gbnf) if gbnf is not None else request.sampling
    if gbnf is None and request.sampling.grammar is None:  # auto: a grammar that wakes at the call
        sampling = lazy_grammar(tool_plan, generator, sampling)
    return replace(request, messages=tuple(messages), style=style, sampling=sampling,
                   shown_tokens=shown_tokens(tool_plan, generator))


def _calls_as_text(tool_plan: ToolPlan, message: ChatMessage) -> ChatMessage:
    """An earlier reply's calls in its content, in the model's own syntax (for a template that
    does not read `tool_calls`, as LFM2's)."""
    text = "".join(call_text(tool_plan.syntax, ToolCall(c["function"]["name"], json.dumps(c["function"]["arguments"])))
                   for c in message.tool_calls)
    return replace(message, content=message.content + text, tool_calls=())


# ----- the reply, read back ------------------------------------------------------------------------


def read(tool_plan: ToolPlan, done: ReplyDone) -> Parsed:
    """The finished reply's calls; a reply whose call does not parse is plain content."""
    text = done.raw_text if tool_plan.syntax.reads_raw else done.text
    try:
        parsed = tool_plan.syntax.parse(text, True, tool_plan.types)
    except ToolCallError:
        try:  # a reply cut inside a later call (max_tokens) keeps the calls it closed
            parsed = tool_plan.syntax.parse(text, False, tool_plan.types)
        except ToolCallError:
            parsed = Parsed(done.text, ())
        if not parsed.calls:
            return Parsed(done.text, ())
    if tool_plan.syntax.reads_raw:
        parsed = Parsed(done.text if not parsed.calls else "", parsed.calls)
    return Parsed(parsed.content, tuple(replace(c, id=c.id or tool_plan.new_id()) for c in parsed.calls))


def openai_calls(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


class ToolStream:
    """A streamed reply's text split into content (sent as it comes) and calls: text that may be
    the start of a call is held back until it is or is not one; a call goes out as its name once
    written, then its arguments as they are written (JSON families; others once the call is
    closed), as OpenAI streams them."""

    def __init__(self, tool_plan: ToolPlan, sent_calls: list[ToolCall] | None = None) -> None:
        self.plan = tool_plan
        self.text = ""
        self.sent = 0
        """Characters of `text` already sent as content."""
        self.start: int | None = None
        """Where the calls begin in `text`, once seen."""
        self.calls = sent_calls if sent_calls is not None else []
        """Calls already sent (shared by a reply's answer and thinking streams)."""
        self.emitted = 0
        """Calls this stream read whole (closed)."""
        self.writing: int | None = None
        """The index of the call whose arguments go out as the model writes them (JSON families)."""
        self.written = 0
        """Characters of its arguments sent."""
        self.failed = False

    def feed(self, piece: str) -> tuple[str, list[dict[str, Any]]]:
        """Content to send now, and tool-call deltas."""
        self.text += piece
        syntax = self.plan.syntax
        if self.start is None:
            found = syntax.find_opening(self.text[self.sent:])
            if found < 0:
                safe = len(self.text) - syntax.held_back(self.text[self.sent:])
                content, self.sent = self.text[self.sent:safe], max(self.sent, safe)
                return content, []
            self.start = self.sent + found
            content, self.sent = self.text[self.sent:self.start], self.start
            return content, self._calls(final=False)
        return "", self._calls(final=False)

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """What is left at the end: the calls not sent yet, or the held text as content."""
        deltas = self._calls(final=True) if self.start is not None else []
        if self.start is None or not (self.emitted or self.writing is not None):
            content, self.sent = self.text[self.sent:], len(self.text)
            return content, deltas
        return "", deltas

    def _calls(self, final: bool) -> list[dict[str, Any]]:
        if self.failed or self.start is None:
            return []
        try:
            parsed = self.plan.syntax.parse(self.text[self.start:], final, self.plan.types)
        except ToolCallError:
            self.failed = True
            return []
        deltas: list[dict[str, Any]] = []
        for call in parsed.calls[self.emitted:]:
            if self.writing is None:  # a call read whole: its name, then its arguments
                call = replace(call, id=call.id or self.plan.new_id())
                deltas.append(self._opened(call))
                deltas.append(_arguments_delta(len(self.calls) - 1, call.arguments))
            else:  # a call whose arguments went out as written: the rest of them
                raw = raw_arguments(self.plan.syntax, self.text[self.start:], self.emitted)
                rest = raw[1][self.written:] if raw is not None else ""
                if rest:
                    deltas.append(_arguments_delta(self.writing, rest))
                self.calls[self.writing] = replace(call, id=self.calls[self.writing].id)
                self.writing, self.written = None, 0
            self.emitted += 1
        if parsed.open and not final:  # a call being written: its name once known, then its arguments
            raw = raw_arguments(self.plan.syntax, self.text[self.start:], self.emitted)
            if raw is not None:
                if self.writing is None:
                    deltas.append(self._opened(ToolCall(raw[0], "", self.plan.new_id())))
                    self.writing = len(self.calls) - 1
                if len(raw[1]) > self.written:
                    deltas.append(_arguments_delta(self.writing, raw[1][self.written:]))
                    self.written = len(raw[1])
        return deltas

    def _opened(self, call: ToolCall) -> dict[str, Any]:
        """The first delta of a call: its index, id, type and name."""
        self.calls.append(call)
        return {"index": len(self.calls) - 1, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}


def _arguments_delta(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}
