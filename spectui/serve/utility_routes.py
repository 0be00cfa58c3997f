"""llama-server's utility endpoints, in its shapes (tools/server/server-context.cpp, the
`post_tokenize`, `post_detokenize`, `post_apply_template` and `handle_count_tokens` handlers):

    POST /tokenize        {"content": text or [text or id, ...], "add_special": false,
                           "parse_special": true, "with_pieces": false}
                          -> {"tokens": [id, ...]}, or [{"id", "piece"}, ...] with pieces (a piece
                             that is not whole UTF-8 comes as its bytes, a list of numbers)
    POST /detokenize      {"tokens": [id, ...]} -> {"content": text}
    POST /apply-template  a chat request -> {"prompt": the text the chat route's prompt is made of}
    POST /chat/completions/input_tokens (and under /v1)
                          a chat request -> {"input_tokens": n, "object": "response.input_tokens"}

A chat request is read exactly as `/v1/chat/completions` reads it (its checks, its bounds, its
tools, thinking switch and continuation: `app.builder`), and its prompt made by the reply core's
own `session.reply.chat_prompt`, so what these say is what a reply would read. The work only
reads the model (its vocabulary, its chat template) and runs on the engine thread between two
cycles of whatever reply is running (`ReplySlot.ask`), not behind the replies in line. A bad
body is a 400 in llama-server's error shape: token ids outside the vocabulary (which llama.cpp
would read out of bounds), and lists and texts past `bounds`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

from spectui.serve import bounds
from spectui.serve.convert import RequestError
from spectui.serve.responses import HttpError
from spectui.serve.slot import Busy, Closed, ReplySlot
from spectui.session.reply import chat_prompt, prompt_of

if TYPE_CHECKING:
    from spectui.engine.generator import Generator
    from spectui.engine.model.llama_model import LlamaModel
    from spectui.session.loaded import BuildRequest, EngineSession

T = TypeVar("T")


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: StrictStr | list[StrictStr | StrictInt] | None = None
    """Text, or llama-server's mixed list of texts and token ids (ids are kept as they are)."""
    add_special: StrictBool = False
    """BOS (and EOS) where the model's vocabulary adds them (only before a first text)."""
    parse_special: StrictBool = True
    """Control tokens written in the text (`<|im_start|>`) become those tokens."""
    with_pieces: StrictBool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tokens: list[StrictInt] = []


async def tokenize(data: object, slot: ReplySlot, n_ctx: int) -> dict[str, Any]:
    body = _validated(TokenizeRequest, data)
    if body.content is not None:
        try:
            bounds.check_tokenize(body.content, n_ctx)
        except bounds.TooLarge as error:
            raise HttpError(400, str(error)) from None
    return await _ask(slot, lambda: _tokenize(slot.session, body))


async def detokenize(data: object, slot: ReplySlot) -> dict[str, Any]:
    body = _validated(DetokenizeRequest, data)
    try:
        bounds.check_token_ids(len(body.tokens))
    except bounds.TooLarge as error:
        raise HttpError(400, str(error)) from None
    return await _ask(slot, lambda: _detokenize(slot.session, body.tokens))


async def prompt_text(slot: ReplySlot, build: BuildRequest) -> str:
    """The chat request's prompt as text (llama-server's /apply-template: a leading BOS the model
    adds by itself is left out, as `common_chat_template_direct_apply_impl` does)."""
    return await _ask(slot, lambda: _prompt(slot.session, build)[0])


async def prompt_tokens(slot: ReplySlot, build: BuildRequest) -> list[int]:
    """The chat request's prompt as the tokens a reply reads."""
    return await _ask(slot, lambda: _prompt(slot.session, build)[1])


async def prompt_read(slot: ReplySlot, build: BuildRequest) -> str:
    """The text of the tokens the request's reply reads, control tokens written out (llama-server's
    `__verbose.prompt`: `server_tokens::detokenize(ctx, true)`)."""
    def work() -> str:
        generator, chat_format = _loaded(slot.session), slot.session.chat_format
        if chat_format is None:
            raise Closed("no model is loaded")
        tokens = prompt_of(chat_format, build(generator), generator.target)
        return _text(generator.target, tokens)

    return await _ask(slot, work)


# ----- the engine thread's part -------------------------------------------------------------------


def _loaded(session: EngineSession) -> Generator:
    generator = session.generator
    if generator is None:  # freed at shutdown
        raise Closed("no model is loaded")
    return generator


def _tokenize(session: EngineSession, body: TokenizeRequest) -> dict[str, Any]:
    """`tokenize_mixed` (tools/server/server-common.cpp): special tokens added only before a
    first text; ids kept."""
    target = _loaded(session).target
    content = body.content
    parts = [] if content is None else [content] if isinstance(content, str) else content
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            tokens += target.tokenize(part, add_special=body.add_special and i == 0,
                                      parse_special=body.parse_special)
        else:
            tokens.append(part)
    _check_ids(tokens, target, "content")
    if not body.with_pieces:
        return {"tokens": tokens}
    return {"tokens": [{"id": token, "piece": _piece(target.token_bytes(token, special=True))} for token in tokens]}


def _piece(data: bytes) -> str | list[int]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


def _detokenize(session: EngineSession, tokens: list[int]) -> dict[str, Any]:
    """`tokens_to_str`: each token's piece, control tokens written out."""
    target = _loaded(session).target
    _check_ids(tokens, target, "tokens")
    return {"content": _text(target, tokens)}


def _text(target: LlamaModel, tokens: list[int]) -> str:
    return b"".join(target.token_bytes(token, special=True) for token in tokens).decode("utf-8", errors="replace")


def _check_ids(tokens: list[int], target: LlamaModel, where: str) -> None:
    n_vocab = target.n_vocab
    bad = next((token for token in tokens if not 0 <= token < n_vocab), None)
    if bad is not None:
        raise RequestError(f"{where}: token {bad} is not in the model's vocabulary (0..{n_vocab - 1})")


def _prompt(session: EngineSession, build: BuildRequest) -> tuple[str, list[int]]:
    generator = _loaded(session)
    chat_format = session.chat_format
    if chat_format is None:
        raise Closed("no model is loaded")
    target = generator.target
    text, tokens = chat_prompt(chat_format, build(generator), target)
    bos = chat_format.bos_token
    if target.add_bos and bos and text.startswith(bos):
        text = text[len(bos):]
    return text, tokens


# ----- the event loop's part ----------------------------------------------------------------------


async def _ask(slot: ReplySlot, work: Callable[[], T]) -> T:
    try:
        return await slot.ask(work)
    except Busy as error:
        raise HttpError(503, str(error), headers={"Retry-After": str(error.retry_after)}) from None
    except Closed as error:
        raise HttpError(503, str(error)) from None
    except RequestError as error:
        raise HttpError(400, str(error)) from None


def _validated(kind: type[TokenizeRequest] | type[DetokenizeRequest], data: object) -> Any:
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
    try:
        bounds.check_json(data)
        return kind.model_validate(data)
    except bounds.TooLarge as error:
        raise HttpError(400, str(error)) from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise HttpError(400, f"{where}: {first['msg']}") from None
