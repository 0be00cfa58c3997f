"""The request bodies `spectui serve` accepts: OpenAI's, plus the fields llama-server adds.

Unknown fields are ignored, as OpenAI-compatible servers do (clients send `user`, `metadata`,
`store` and the like); fields that would change what the reply means but that spectui cannot honour
(penalties, `n` > 1, `echo`, `suffix`) are refused in one line by `check_supported`, never
silently dropped. Bounds are `spectui.limits`'s, as on the command line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from spectui import limits
from spectui.limits import MAX_DRAFT

MAX_TOP_LOGPROBS = 20
"""OpenAI's bound for `top_logprobs` (and a completion's `logprobs`)."""

Probability = Annotated[float, Field(ge=0.0, le=limits.MAX_PROBABILITY)]
Tokens = Annotated[int, Field(ge=-1, le=limits.MAX_REPLY_TOKENS)]


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(Lenient):
    include_usage: bool = False
    """Send a last chunk with `usage` (and `timings`) and no choices."""


class JsonSchemaFormat(Lenient):
    name: str = ""
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    """The JSON schema the reply must match (llama.cpp's grammar, made from it)."""
    strict: bool | None = None


class ResponseFormat(Lenient):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: JsonSchemaFormat | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """llama-server's: a schema given with `json_object`."""


class ContentPart(Lenient):
    type: str
    text: str | None = None


class Message(Lenient):
    role: str
    content: str | list[ContentPart] | None = None
    reasoning_content: str | None = None
    """An earlier reply's reasoning (as this server returns it)."""
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    """A `tool` (or legacy `function`) message's function name."""


class Sampling(Lenient):
    """What both routes take to shape the reply."""

    model: str | None = None
    """The served model's id (`GET /v1/models`); other names answer 404 only with --strict-model."""
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0.0, le=limits.MAX_TEMPERATURE)] | None = None
    """0 is greedy. Omitted: the model's recommended sampling, else llama.cpp's default (0.8)."""
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=0, le=limits.MAX_TOP_K)] | None = None
    """llama-server's; 0 turns it off."""
    min_p: Probability | None = None
    """llama-server's; 0 turns it off."""
    seed: Annotated[int, Field(ge=-1, le=limits.MAX_SEED)] | None = None
    """Same seed, same reply; -1 or omitted: a fresh one each time."""
    max_tokens: Tokens | None = None
    max_completion_tokens: Tokens | None = None
    n_predict: Tokens | None = None
    """llama-server's name for max_tokens (-1: until the context is full)."""
    stop: str | list[str] | None = None
    logit_bias: dict[str, float | bool] | list[list[Any]] | None = None
    """{"token id": bias} (OpenAI), or llama-server's [[id or text, bias or false], ...]."""
    response_format: ResponseFormat | None = None
    grammar: str | None = None
    """llama-server's: a GBNF grammar the reply must follow."""
    json_schema: dict[str, Any] | None = None
    """llama-server's: a JSON schema the reply must match."""
    n: StrictInt | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    k: Annotated[int, Field(ge=0, le=MAX_DRAFT)] | Literal["auto"] | None = None
    """spectui's: the draft length (0 turns speculation off); omitted: `serve -k`'s."""
    drafter: str | None = None
    """spectui's: which of the loaded drafters proposes (`GET /v1/models` lists them)."""
    return_tokens: bool = False
    """llama-server's: also return the reply's token ids (`tokens`)."""
    return_progress: StrictBool = False
    """llama-server's: a stream also reports the prompt's reading (`prompt_progress`)."""
    verbose: StrictBool = False
    """llama-server's: a whole (not streamed) response also holds `__verbose`, with the prompt
    as the model read it."""


class ChatRequest(Sampling):
    messages: list[Message]
    logprobs: StrictBool = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: list[Any] | None = None
    """Function tools (`serve.tools`); their call syntax is the chat template's."""
    tool_choice: Any = None
    parallel_tool_calls: StrictBool | None = None
    functions: list[Any] | None = None
    """OpenAI's legacy name for tools (`function_call` for tool_choice)."""
    function_call: Any = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    """For templates that take it (gpt-oss)."""
    chat_template_kwargs: dict[str, Any] | None = None
    """llama-server's: `{"enable_thinking": false}` for templates that take it."""
    add_generation_prompt: StrictBool | None = None
    """vLLM's and llama-server's: false ends the prompt with the last message (no reply opened)."""
    continue_final_message: Any = None
    """vLLM's and llama-server's: true (or "content", "reasoning_content") continues the last
    message instead of opening a new turn (`continuation`); llama-server does so by itself when
    the last message is the assistant's, and so does spectui."""


class CompletionRequest(Sampling):
    prompt: str | list[StrictInt] | list[str] | list[list[StrictInt]]
    logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    """The legacy completions API: how many alternatives to list per token."""
    n_probs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    """llama-server's name for it."""
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class Unsupported(ValueError):
    """A field spectui cannot honour; the message says which and what to do."""


Continuation = Literal["", "content", "reasoning"]


def continuation(body: ChatRequest) -> Continuation:
    """What of the last message the reply continues ("": none, a new turn opens), as llama-server
    decides it (tools/server/server-common.cpp, `oaicompat_chat_params_parse`, and
    `common_chat_continuation_parse`, common/chat.cpp): `continue_final_message` when given (true:
    whichever the message has, its reasoning if it has only that), else the assistant's last
    message when it ends the list. Refused in llama-server's words: two assistant messages at the
    end, a continuation with `add_generation_prompt` true, continuing a message of tool calls."""
    given = body.continue_final_message
    mode: str = ""
    if given is True:
        mode = "auto"
    elif given in ("content", "reasoning_content"):
        mode = "content" if given == "content" else "reasoning"
    add_generation_prompt = body.add_generation_prompt is not False
    messages = body.messages
    last = messages[-1] if messages else None
    if not mode and last is not None and last.role == "assistant":  # llama-server's prefill_assistant
        if len(messages) >= 2 and messages[-2].role == "assistant":
            raise Unsupported("Cannot have 2 or more assistant messages at the end of the list.")
        mode, add_generation_prompt = "auto", False
    if not mode or last is None:
        return ""
    if add_generation_prompt:
        raise Unsupported("Cannot set both add_generation_prompt and continue_final_message to true.")
    if last.role == "assistant" and last.tool_calls:
        raise Unsupported("Cannot continue an assistant message that contains tool calls.")
    if mode == "auto":
        return "reasoning" if last.reasoning_content and not last.content else "content"
    return "content" if mode == "content" else "reasoning"


def check_supported(body: Sampling) -> None:
    """Refuse, in one line, what would change the reply's meaning if silently dropped."""
    if body.n is not None and not 1 <= body.n <= limits.MAX_CHOICES:
        raise Unsupported(f"n = {body.n}: ask for 1 to {limits.MAX_CHOICES} choices (MAX_CHOICES)")
    if (body.n or 1) > 1 and body.stream:
        raise Unsupported(f"n = {body.n} is answered whole, one choice after another: leave out stream, "
                          "or send one streamed request per choice")
    if (body.n or 1) > 1 and body.return_tokens:
        raise Unsupported("return_tokens takes one choice: leave out n, or return_tokens")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(body, name):
            raise Unsupported(f"{name} is not supported: spectui keeps the target model's own distribution; "
                              "leave it out or set it to 0")
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        if getattr(body, name) == 0:  # OpenAI refuses it; llama-server would decode a token anyway
            raise Unsupported(f"{name} = 0 asks for no tokens: give 1 or more, or -1 (or leave it out) for a reply "
                              "until the end token or a full context")
    if body.repeat_penalty not in (None, 1.0):
        raise Unsupported("repeat_penalty is not supported: leave it out or set it to 1")
    if isinstance(body, ChatRequest):
        if (body.tools or body.functions) and body.tool_choice != "none" and body.grammar is not None:
            raise Unsupported("Cannot use custom grammar constraints with tools.")  # llama-server's words
        if not body.messages:
            raise Unsupported("messages is empty: send at least one message")
        if body.top_logprobs is not None and not body.logprobs:
            raise Unsupported("top_logprobs requires logprobs to be true")
        continuation(body)
    if isinstance(body, CompletionRequest):
        if body.echo:
            raise Unsupported("echo is not supported: the reply holds only the continuation")
        if body.suffix is not None:
            raise Unsupported("suffix (fill in the middle) is not supported")
        if body.best_of not in (None, 1):
            raise Unsupported("best_of is not supported: only one choice per request")
        batched = isinstance(body.prompt, list) and body.prompt and not isinstance(body.prompt[0], int)
        if batched and len(body.prompt) != 1:
            raise Unsupported(f"{len(body.prompt)} prompts in one request: send one prompt per request")
    grammars = [name for name in ("grammar", "json_schema") if getattr(body, name) is not None]
    if body.response_format is not None and body.response_format.type != "text":
        grammars.append("response_format")
    if len(grammars) > 1:
        raise Unsupported(f"{' and '.join(grammars)} both constrain the reply: give one of them")
