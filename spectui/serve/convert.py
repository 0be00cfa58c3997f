"""An HTTP request body, validated, made into the reply core's `ReplyRequest`.

This runs on the engine thread, beside the reply (it may tokenize a logit bias given as text,
and checks token ids against the loaded vocabulary): nothing here ever runs on the event loop.
Sampling fields a request leaves out come from `Defaults` (the model's recommended sampling, and
`spectui serve`'s own options), as llama-server fills them from its command line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spectui.chat.template import ChatMessage, PromptStyle
from spectui.engine.generation_config import AUTO, DraftControl, DraftLength, SamplingConfig
from spectui.errors import SpectuiError
from spectui.serve.schema import ChatRequest, CompletionRequest, Message, Sampling, continuation
from spectui.session.reply import ReplyRequest

if TYPE_CHECKING:
    from spectui.engine.generator import Generator

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
"""OpenAI's roles as the chat template knows them (`developer` is the newer name for system)."""


TOKEN_ID = re.compile(r"-?[0-9]+")
"""A logit_bias key that is a token id (ASCII digits: `str.isdigit` takes "²", which `int` refuses);
any other key is a text whose tokens are biased, as llama-server reads it (`strtol` of the whole key)."""


class RequestError(SpectuiError):
    """A request the loaded model cannot answer as asked (HTTP 400, invalid_request_error)."""


@dataclass(frozen=True)
class Defaults:
    """What a request that leaves a field out gets."""

    sampling: SamplingConfig
    """The model's recommended sampling (`engine.config.recommended_sampling`: its GGUF's
    general.sampling.*, else llama.cpp's defaults), with `--temperature` etc. over it."""
    max_tokens: int | None = None
    """`--max-tokens`; None: until the end token or a full context, as llama-server's -1."""
    k: DraftLength = AUTO
    drafter: str | None = None


def reply_request(body: ChatRequest | CompletionRequest, generator: Generator, defaults: Defaults) -> ReplyRequest:
    """The reply core's request for `body` (raises `RequestError` with one line)."""
    n_vocab = generator.target.n_vocab
    sampling = replace(sampling_config(body, defaults.sampling), logit_bias=logit_bias(body, generator),
                       grammar=grammar_of(body))
    max_tokens = max_tokens_of(body, defaults.max_tokens, generator.target.n_ctx)
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    draft = draft_control(body, generator, defaults)
    if isinstance(body, ChatRequest):
        return ReplyRequest(messages=tuple(continued(chat_messages(body.messages), body)), sampling=sampling,
                            max_tokens=max_tokens, stop=stop, draft=draft, style=prompt_style(body),
                            logprobs=(body.top_logprobs or 0) if body.logprobs else None)
    prompt: str | tuple[int, ...]
    if isinstance(body.prompt, str):
        prompt = body.prompt
    elif body.prompt and isinstance(body.prompt[0], str):
        prompt = body.prompt[0]
    elif body.prompt and isinstance(body.prompt[0], list):
        prompt = tuple(body.prompt[0])
    else:
        prompt = tuple(body.prompt)  # type: ignore[arg-type]
    if isinstance(prompt, tuple) and any(not 0 <= t < n_vocab for t in prompt):
        raise RequestError(f"prompt: token ids must be 0..{n_vocab - 1}")
    if not prompt:
        raise RequestError("prompt is empty: send the text to continue")
    n = body.logprobs if body.logprobs is not None else body.n_probs
    return ReplyRequest(prompt=prompt, sampling=sampling, max_tokens=max_tokens, stop=stop, draft=draft, logprobs=n)


def sampling_config(body: Sampling, defaults: SamplingConfig) -> SamplingConfig:
    seed = None if body.seed is None or body.seed < 0 else body.seed
    return SamplingConfig(
        temperature=defaults.temperature if body.temperature is None else body.temperature,
        top_k=defaults.top_k if body.top_k is None else body.top_k,
        top_p=defaults.top_p if body.top_p is None else body.top_p,
        min_p=defaults.min_p if body.min_p is None else body.min_p,
        seed=defaults.seed if seed is None else seed,
    )


def max_tokens_of(body: Sampling, default: int | None, n_ctx: int) -> int:
    """max_completion_tokens, else max_tokens, else llama-server's n_predict, else `default`;
    -1 (or no default) means "as long as the context allows", as llama-server reads -1 (0 is
    refused by `schema.check_supported`)."""
    for value in (body.max_completion_tokens, body.max_tokens, body.n_predict, default):
        if value is not None:
            return n_ctx if value < 0 else value
    return n_ctx


def chat_messages(messages: list[Message]) -> list[ChatMessage]:
    out = []
    for i, message in enumerate(messages):
        role = ROLES.get(message.role)
        if message.role in ("tool", "function"):  # a tool's result (`function`: OpenAI's legacy name)
            out.append(ChatMessage("tool", message_text(message, i), tool_call_id=message.tool_call_id or "",
                                   name=message.name or ""))
            continue
        if role is None:
            raise RequestError(f"messages[{i}].role {message.role!r}: use system, developer, user, assistant or tool")
        calls = tool_call_dicts(message.tool_calls, i) if message.tool_calls and role == "assistant" else ()
        out.append(ChatMessage(role, message_text(message, i), message.reasoning_content or "", tool_calls=calls))
    if len(out) >= 2 and out[-1].role == out[-2].role == "assistant":
        raise RequestError("Cannot have 2 or more assistant messages at the end of the list.")  # llama-server's
    return out


def tool_call_dicts(calls: list[Any], index: int) -> tuple[dict[str, Any], ...]:
    """An assistant message's `tool_calls` as templates read them: arguments as objects."""
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(f"messages[{index}].tool_calls[{j}]: a call needs function.name")
        arguments = function.get("arguments") or "{}"
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                raise RequestError(f"messages[{index}].tool_calls[{j}].function.arguments is not JSON") from None
        out.append({"id": str(call.get("id") or ""), "type": "function",
                    "function": {"name": function["name"], "arguments": arguments}})
    return tuple(out)


def message_text(message: Message, index: int) -> str:
    content = message.content
    if content is None:
        if message.role == "assistant":
            return ""
        raise RequestError(f"messages[{index}] has no content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise RequestError(f"messages[{index}]: content of type {part.type!r} is not supported (text only)")
        parts.append(part.text)
    return "".join(parts)


def prompt_style(body: ChatRequest) -> PromptStyle:
    """The template variables a request may set (enable_thinking, reasoning_effort), and whether
    the prompt opens a reply or continues the last message (`schema.continuation`)."""
    kwargs = body.chat_template_kwargs or {}
    thinking = kwargs.get("enable_thinking", True)
    effort = body.reasoning_effort or kwargs.get("reasoning_effort", "medium")
    continue_final = continuation(body)
    return PromptStyle(mode="", thinking=bool(thinking), reasoning_effort=str(effort),
                       add_generation_prompt=body.add_generation_prompt is not False and not continue_final,
                       continue_final=continue_final)


def continued(messages: list[ChatMessage], body: ChatRequest) -> list[ChatMessage]:
    """The messages, the one a reply continues with its text parts joined by blank lines, as
    llama.cpp writes a continued message (`common_chat_msg::render_content`, common/chat.cpp)."""
    last = body.messages[-1]
    if continuation(body) != "content" or isinstance(last.content, str | None):
        return messages
    text = "\n\n".join(part.text for part in last.content if part.type == "text" and part.text is not None)
    return [*messages[:-1], replace(messages[-1], content=text)]


def logit_bias(body: Sampling, generator: Generator) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"id": bias} or llama-server's [[id or text, bias or false]]; `false` bans the
    token, text biases each of its tokens."""
    given = body.logit_bias
    if not given:
        return ()
    pairs = list(given.items()) if isinstance(given, dict) else [tuple(p) for p in given]
    target = generator.target
    out: dict[int, float] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise RequestError("logit_bias: each entry needs a token and a bias")
        key, value = pair
        bias = _bias_value(value)
        for token in _bias_tokens(key, target):
            out[token] = out.get(token, 0.0) + bias
    return tuple(sorted(out.items()))


def _bias_value(value: object) -> float:
    if value is False:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"logit_bias: {value!r} is not a bias (a number, or false to ban the token)")
    return float(value)


def _bias_tokens(key: object, target: object) -> list[int]:
    n_vocab = target.n_vocab  # type: ignore[attr-defined]
    if isinstance(key, int) and not isinstance(key, bool):
        token = key
    elif isinstance(key, str) and TOKEN_ID.fullmatch(key):
        token = int(key)
    elif isinstance(key, str) and key:
        return list(target.tokenize(key, add_special=False, parse_special=False))  # type: ignore[attr-defined]
    else:
        raise RequestError(f"logit_bias: {key!r} is neither a token id nor a text")
    if not 0 <= token < n_vocab:
        raise RequestError(f"logit_bias: token {token} is not in the model's vocabulary (0..{n_vocab - 1})")
    return [token]


def grammar_of(body: Sampling) -> str | None:
    """GBNF for `grammar`, `json_schema` or `response_format` (json_object: any object, as
    llama-server makes it); None for free text."""
    if body.grammar:
        return body.grammar
    schema = body.json_schema
    fmt = body.response_format
    if fmt is not None and fmt.type == "json_object":
        schema = fmt.schema_ if fmt.schema_ is not None else (schema or {})
    elif fmt is not None and fmt.type == "json_schema":
        given = fmt.json_schema.schema_ if fmt.json_schema is not None else None
        schema = given if isinstance(given, dict) else {}
    if schema is None:
        return None
    if not schema:
        schema = {"type": "object"}  # llama-server: an absent or empty schema means any object
    return schema_grammar(schema)


def schema_grammar(schema: dict[str, object]) -> str:
    """llama.cpp's JSON-schema-to-GBNF conversion (as llama-cpp-python ships it)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        grammar: str = json_schema_to_gbnf(json.dumps(schema))
        return grammar
    except Exception as error:  # the converter raises whatever its schema walk hits
        raise RequestError(f"response_format: this JSON schema cannot be turned into a grammar ({error})") from None


def draft_control(body: Sampling, generator: Generator, defaults: Defaults) -> DraftControl:
    """The request's K and drafter (spectui's own fields), else `spectui serve`'s."""
    k: DraftLength = defaults.k if body.k is None else body.k
    drafter = body.drafter or defaults.drafter
    if drafter is not None and drafter not in (*generator.kinds, "none"):
        offered = ", ".join(generator.kinds) or "none"
        raise RequestError(f"drafter {drafter!r} is not loaded: this server offers {offered}")
    return DraftControl(k, drafter=drafter)
