"""The HTTP routes of `spectui serve` (Starlette): OpenAI's, with and without `/v1`.

    GET  /health              {"status": "ok"} (public, even with an API key)
    GET  /v1/models           the loaded pair as one model, with its drafters
    POST /v1/chat/completions the model's own chat template; reasoning in `reasoning_content`
    POST /v1/completions      a raw prompt, continued
    GET  /metrics             Prometheus text
    POST /tokenize, /detokenize, /apply-template, /v1/chat/completions/input_tokens
                              llama-server's, in its shapes (`utility_routes`)

Every route answers from the moment the socket listens: while the models load, with llama-server's
503 "Loading model" (`Serving.state` is None until then). A handler reads and checks the body on
the event loop (size, JSON, fields, and `bounds`: what the request would make the server build or
hold), then hands the reply to the engine thread (`slot.ReplySlot`) and only awaits its events: no
llama.cpp call ever runs here. The status line is sent once the reply core has said the prompt
fits (`ReplyOpened`), so a prompt over the context is a 400 like llama-server's, not a broken
stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from spectui import limits
from spectui.serve import bounds, choices, reply_jobs, responses, tools, utility_routes
from spectui.serve.convert import Defaults, RequestError, reply_request
from spectui.serve.metrics import CONTENT_TYPE, Metrics
from spectui.serve.responses import HttpError, failure
from spectui.serve.schema import ChatRequest, CompletionRequest, Unsupported, check_supported
from spectui.serve.slot import ReplySlot
from spectui.serve.streams import collect, stream_chat, stream_text, whole_response
from spectui.session.loaded import BuildRequest

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Request bodies above this are refused (413): far above any prompt a context holds."""
PUBLIC_PATHS = frozenset({"/health", "/v1/health"})
"""Answered without an API key (llama-server's tools/server/server-http.cpp)."""


@dataclass
class ServerState:
    """What the routes share: the engine, who the model is, and how requests are checked."""

    slot: ReplySlot
    defaults: Defaults
    model_id: str
    model_info: dict[str, Any]
    """`GET /v1/models`'s entry besides id and object (drafters, files, context)."""
    aliases: tuple[str, ...] = ()
    api_key: str | None = None
    strict_model: bool = False
    """Refuse (404) a `model` that is not the served one or an alias; llama-server, serving one
    model, answers whatever a client names, and so does spectui unless asked."""
    max_body: int = MAX_BODY_BYTES
    metrics: Metrics = field(default_factory=Metrics)
    n_ctx: int = 0
    """The target's context, which bounds a prompt's size (0: not checked before the engine)."""


@dataclass
class Serving:
    """What the app serves: None while the models load."""

    state: ServerState | None = None


LOADING = HttpError(503, "Loading model", "unavailable_error")
"""llama-server's answer to every route before its model is loaded (tools/server/server-http.cpp)."""


def build_app(serving: Serving, on_shutdown: Callable[[], None] | None = None) -> Starlette:
    routes = []
    for path, endpoint, methods in (("/health", health, ["GET"]), ("/models", models, ["GET"]),
                                    ("/chat/completions", chat_completions, ["POST"]),
                                    ("/completions", completions, ["POST"])):
        routes += [Route(path, endpoint, methods=methods), Route(f"/v1{path}", endpoint, methods=methods)]
    routes.append(Route("/metrics", metrics, methods=["GET"]))
    routes += [Route(path, endpoint, methods=["POST"]) for path, endpoint in (
        ("/tokenize", tokenize), ("/detokenize", detokenize), ("/apply-template", apply_template),
        ("/chat/completions/input_tokens", input_tokens), ("/v1/chat/completions/input_tokens", input_tokens))]

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:  # after the last connection closed (or the drain timed out)
            await asyncio.to_thread(on_shutdown)

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_exception}, lifespan=lifespan)
    app.state.serve = serving
    return app


Handler = Callable[[Request], Awaitable[Response]]


def server(request: Request) -> ServerState:
    """The loaded server's state (`answered` has made sure there is one)."""
    state = serving(request).state
    assert state is not None
    return state


def serving(request: Request) -> Serving:
    holder: Serving = request.app.state.serve  # set by build_app (starlette's State is untyped)
    return holder


async def http_exception(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    message = {404: f"no route {request.url.path}: see `GET /v1/models` and /v1/chat/completions",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(error.status_code, str(error.detail))
    return HttpError(error.status_code, message, "not_found_error" if error.status_code == 404 else
                     "invalid_request_error").response()


def answered(route: str) -> Callable[[Handler], Handler]:
    """Check the API key, turn `HttpError` into its answer, count the request."""

    def wrap(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            state = serving(request).state
            if state is None:
                return LOADING.response()
            try:
                authorize(request, state)
                response = await handler(request)
            except HttpError as error:
                response = error.response()
            except Exception as error:  # a bug: one line to the client, the traceback in the log
                response = failure(error).response()
            state.metrics.requests.labels(route, str(response.status_code)).inc()
            return response

        endpoint.__name__ = handler.__name__
        return endpoint

    return wrap


def authorize(request: Request, state: ServerState) -> None:
    """`Authorization: Bearer KEY` (the scheme in any case, RFC 7235), a bare key there, or
    `X-Api-Key: KEY`, as llama-server takes it. Compared as bytes (a header's bytes as sent, the
    key's as UTF-8: Starlette's str of a header is its Latin-1 reading) and in constant time (of
    their digests: the key's length stays unknown too)."""
    if state.api_key is None or request.url.path in PUBLIC_PATHS:
        return
    given = presented_key(request.headers.raw)
    expected = state.api_key.strip().encode("utf-8", "surrogateescape")  # argv's undecodable bytes as given
    if not hmac.compare_digest(hashlib.sha256(given).digest(), hashlib.sha256(expected).digest()):
        raise HttpError(401, "Invalid API Key", "authentication_error", {"WWW-Authenticate": "Bearer"})


def presented_key(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The key a request presents, as bytes: Authorization's (less a Bearer scheme), else X-Api-Key's."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:  # names come lower-cased from the ASGI server; the first of each counts
        found.setdefault(name, value)
    value = found.get(b"authorization", b"").strip() or found.get(b"x-api-key", b"").strip()
    scheme, _, rest = value.partition(b" ")
    if scheme.lower() == b"bearer":
        return rest.strip()
    return value


# ----- the simple routes ------------------------------------------------------------------------


@answered("health")
async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


@answered("models")
async def models(request: Request) -> Response:
    state = server(request)
    entry = {"id": state.model_id, "object": "model", "created": 0, "owned_by": "spectui",
             "aliases": list(state.aliases), **state.model_info}
    return JSONResponse({"object": "list", "data": [entry]})


@answered("metrics")
async def metrics(request: Request) -> Response:
    state = server(request)
    state.metrics.waiting.set(state.slot.waiting)
    state.metrics.running.set(state.slot.running)
    return Response(state.metrics.text(), media_type=CONTENT_TYPE)


# ----- llama-server's utilities (`utility_routes`: on the engine thread, between two cycles) ------


@answered("tokenize")
async def tokenize(request: Request) -> Response:
    state = server(request)
    return JSONResponse(await utility_routes.tokenize(await read_json(request, state.max_body), state.slot,
                                                      state.n_ctx))


@answered("detokenize")
async def detokenize(request: Request) -> Response:
    state = server(request)
    return JSONResponse(await utility_routes.detokenize(await read_json(request, state.max_body), state.slot))


@answered("apply-template")
async def apply_template(request: Request) -> Response:
    state = server(request)
    build, _plan = builder(checked(ChatRequest, await read_json(request, state.max_body), state), state)
    return JSONResponse({"prompt": await utility_routes.prompt_text(state.slot, build)})


@answered("input_tokens")
async def input_tokens(request: Request) -> Response:
    state = server(request)
    build, _plan = builder(checked(ChatRequest, await read_json(request, state.max_body), state), state)
    count = len(await utility_routes.prompt_tokens(state.slot, build))
    return JSONResponse({"input_tokens": count, "object": "response.input_tokens"})


# ----- replies ------------------------------------------------------------------------------------


@answered("chat")
async def chat_completions(request: Request) -> Response:
    return await reply(request, ChatRequest)


@answered("completions")
async def completions(request: Request) -> Response:
    return await reply(request, CompletionRequest)


async def reply(request: Request, kind: type[ChatRequest] | type[CompletionRequest]) -> Response:
    state = server(request)
    body = checked(kind, await read_json(request, state.max_body), state)
    if body.stream:
        return await streamed(request, state, body)
    prompt = await utility_routes.prompt_read(state.slot, builder(body, state)[0]) if body.verbose else None
    answers = [await whole(request, state, each, prompt) for each in choices.bodies(body, state.defaults.sampling.seed)]
    return JSONResponse(answers[0] if len(answers) == 1 else choices.merged(answers))


async def whole(request: Request, state: ServerState, body: ChatRequest | CompletionRequest,
                prompt: str | None) -> dict[str, Any]:
    """One reply, answered whole (a choice of it, where `n` asks for several)."""
    build, tool_plan = builder(body, state)
    job = reply_jobs.submit(state.slot, build, state.metrics.busy.inc)
    watcher = asyncio.create_task(reply_jobs.watch_disconnect(request, job))
    try:
        await reply_jobs.first_event(job)
        completion = responses.Completion(body.model or state.model_id, chat=isinstance(body, ChatRequest))
        done, pieces, entries = await collect(job)
        return whole_response(completion, done, pieces, entries, body.return_tokens, tool_plan, prompt)
    except BaseException:
        job.cancel.set()
        raise
    finally:
        watcher.cancel()


async def streamed(request: Request, state: ServerState, body: ChatRequest | CompletionRequest) -> Response:
    """One reply, streamed: the stream starts once the prompt is known to fit."""
    build, tool_plan = builder(body, state)
    job = reply_jobs.submit(state.slot, build, state.metrics.busy.inc)
    watcher = asyncio.create_task(reply_jobs.watch_disconnect(request, job))
    try:
        opened = await reply_jobs.first_event(job)
    except BaseException:
        job.cancel.set()
        raise
    finally:
        watcher.cancel()  # the streaming response listens for the disconnect itself
    completion = responses.Completion(body.model or state.model_id, chat=isinstance(body, ChatRequest))
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    progress = opened if body.return_progress else None
    chunks = (stream_chat(job, completion, include_usage, tool_plan, body.logprobs, progress)
              if isinstance(body, ChatRequest) else stream_text(job, completion, include_usage, progress))
    return StreamingResponse(chunks, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def builder(body: ChatRequest | CompletionRequest, state: ServerState) -> tuple[BuildRequest, tools.ToolPlan | None]:
    """How the engine thread makes the request's `ReplyRequest` (with its tools, for a chat that
    has some), and the tool plan; `HttpError` for tools the template cannot take."""
    chat_format = state.slot.session.chat_format
    if isinstance(body, ChatRequest) and chat_format is not None:
        try:
            tool_plan = tools.plan(body, chat_format, state.model_id)
        except RequestError as error:
            raise HttpError(400, str(error)) from None
        if tool_plan is not None:
            return partial(tools.reply_request, body, defaults=state.defaults, tool_plan=tool_plan,
                           chat_format=chat_format), tool_plan
    return partial(reply_request, body, defaults=state.defaults), None


def checked(kind: type[ChatRequest] | type[CompletionRequest], data: object,
            state: ServerState) -> ChatRequest | CompletionRequest:
    """The body validated, within `bounds`, naming a served model (or any, as llama-server)."""
    body = parse(kind, data)
    try:
        bounds.check_body(body, state.n_ctx)
    except bounds.TooLarge as error:
        raise HttpError(400, str(error)) from None
    check_model(body.model, state)
    return body


def parse(kind: type[ChatRequest] | type[CompletionRequest], data: object) -> ChatRequest | CompletionRequest:
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
    try:
        bounds.check_json(data)
    except bounds.TooLarge as error:
        raise HttpError(400, str(error)) from None
    try:
        body = kind.model_validate(data)
        check_supported(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise HttpError(400, f"{where}: {first['msg']}") from None
    except Unsupported as error:
        raise HttpError(400, str(error)) from None
    return body


async def read_json(request: Request, limit: int) -> object:
    """The body as JSON; 413 past `limit` bytes (before reading it all when it says its length)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"the request body is {int(declared)} bytes; the most this server reads is {limit}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HttpError(413, f"the request body is over {limit} bytes, the most this server reads")
            chunks.append(chunk)
    except ClientDisconnect:
        raise HttpError(400, "the client went away before sending the whole body") from None
    try:
        return json.loads(b"".join(chunks), parse_constant=_not_json)
    except RecursionError:
        raise HttpError(400, f"the body nests arrays and objects over {limits.MAX_JSON_DEPTH} deep, the most this "
                             "server reads (MAX_JSON_DEPTH)") from None
    except ValueError as error:  # not UTF-8, not JSON, NaN, an integer of over 4300 digits
        raise HttpError(400, f"the body is not valid JSON ({error})") from None


def _not_json(name: str) -> object:
    """NaN, Infinity and -Infinity are Python's, not JSON's (llama-server refuses them too)."""
    raise ValueError(f"{name} is not a JSON value")


def check_model(name: str | None, state: ServerState) -> None:
    if not state.strict_model or not name or name in (state.model_id, *state.aliases):
        return
    raise HttpError(404, f"model {name!r} is not served here; this server serves {state.model_id!r} "
                         "(GET /v1/models)", "not_found_error")
