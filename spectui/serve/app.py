"""The HTTP routes of `spectui serve` (Starlette): OpenAI's, with and without `/v1`.

    GET  /health              {"status": "ok"} (public, even with an API key)
    GET  /v1/models           the loaded pair as one model, with its drafters
    POST /v1/chat/completions the model's own chat template; reasoning in `reasoning_content`
    POST /v1/completions      a raw prompt, continued
    GET  /metrics             Prometheus text

A handler reads and checks the body on the event loop (size, JSON, fields), then hands the reply
to the engine thread (`slot.ReplySlot`) and only awaits its events: no llama.cpp call ever runs
here. The status line is sent once the reply core has said the prompt fits (`ReplyOpened`), so a
prompt over the context is a 400 like llama-server's, not a broken stream.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Callable
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

from spectui.errors import SpectuiError
from spectui.serve import responses
from spectui.serve.convert import Defaults, RequestError, reply_request
from spectui.serve.metrics import CONTENT_TYPE, Metrics
from spectui.serve.schema import ChatRequest, CompletionRequest, Unsupported, check_supported
from spectui.serve.slot import Busy, Closed, Failed, Job, ReplySlot
from spectui.session.reply import ReplyDone, ReplyLogprobs, ReplyOpened, ReplyPiece

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Request bodies above this are refused (413): far above any prompt a context holds."""
PUBLIC_PATHS = frozenset({"/health", "/v1/health"})
"""Answered without an API key (llama-server's tools/server/server-http.cpp)."""


class HttpError(Exception):
    """An answer other than 200, in OpenAI's error shape."""

    def __init__(self, status: int, message: str, kind: str | None = None, headers: dict[str, str] | None = None,
                 **extra: object) -> None:
        super().__init__(message)
        self.status, self.kind, self.headers, self.extra = status, kind, headers or {}, extra

    def response(self) -> JSONResponse:
        return JSONResponse(responses.error_body(self.status, str(self), self.kind, **self.extra),
                            status_code=self.status, headers=self.headers)


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


def build_app(state: ServerState, on_shutdown: Callable[[], None] | None = None) -> Starlette:
    routes = []
    for path, endpoint, methods in (("/health", health, ["GET"]), ("/models", models, ["GET"]),
                                    ("/chat/completions", chat_completions, ["POST"]),
                                    ("/completions", completions, ["POST"])):
        routes += [Route(path, endpoint, methods=methods), Route(f"/v1{path}", endpoint, methods=methods)]
    routes.append(Route("/metrics", metrics, methods=["GET"]))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:  # after the last connection closed (or the drain timed out)
            await asyncio.to_thread(on_shutdown)

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_exception}, lifespan=lifespan)
    app.state.serve = state
    return app


def server(request: Request) -> ServerState:
    return request.app.state.serve


async def http_exception(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    message = {404: f"no route {request.url.path}: see `GET /v1/models` and /v1/chat/completions",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(error.status_code, str(error.detail))
    return HttpError(error.status_code, message, "not_found_error" if error.status_code == 404 else
                     "invalid_request_error").response()


def answered(route: str) -> Callable[[Callable[..., Any]], Callable[[Request], Any]]:
    """Check the API key, turn `HttpError` into its answer, count the request."""

    def wrap(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            state = server(request)
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
    if state.api_key is None or request.url.path in PUBLIC_PATHS:
        return
    given = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
    given = given.removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), state.api_key.encode()):
        raise HttpError(401, "Invalid API Key", "authentication_error", {"WWW-Authenticate": "Bearer"})


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


# ----- replies ------------------------------------------------------------------------------------


@answered("chat")
async def chat_completions(request: Request) -> Response:
    return await reply(request, ChatRequest)


@answered("completions")
async def completions(request: Request) -> Response:
    return await reply(request, CompletionRequest)


async def reply(request: Request, kind: type[ChatRequest] | type[CompletionRequest]) -> Response:
    state = server(request)
    body = parse(kind, await read_json(request, state.max_body))
    check_model(body.model, state)
    try:
        job = state.slot.submit(partial(reply_request, body, defaults=state.defaults))
    except Busy as error:
        state.metrics.busy.inc()
        raise HttpError(503, str(error), headers={"Retry-After": str(error.retry_after)}) from None
    except Closed as error:
        raise HttpError(503, str(error)) from None
    watcher = asyncio.create_task(watch_disconnect(request, job))
    try:
        await first_event(job)
        completion = responses.Completion(body.model or state.model_id, chat=isinstance(body, ChatRequest))
        if body.stream:
            watcher.cancel()  # the streaming response listens for the disconnect itself
            stream = stream_chat if isinstance(body, ChatRequest) else stream_text
            include_usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(stream(job, completion, include_usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        done, pieces, entries = await collect(job)
        return JSONResponse(whole_response(completion, done, pieces, entries, body.return_tokens))
    except BaseException:
        job.cancel.set()
        raise
    finally:
        watcher.cancel()  # (a stream's was already: its response listens for the disconnect)


def parse(kind: type[ChatRequest] | type[CompletionRequest], data: object) -> ChatRequest | CompletionRequest:
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
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
        return json.loads(b"".join(chunks))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HttpError(400, f"the body is not valid JSON ({error})") from None


def check_model(name: str | None, state: ServerState) -> None:
    if not state.strict_model or not name or name in (state.model_id, *state.aliases):
        return
    raise HttpError(404, f"model {name!r} is not served here; this server serves {state.model_id!r} "
                         "(GET /v1/models)", "not_found_error")


async def watch_disconnect(request: Request, job: Job) -> None:
    """Stop the reply when its client hangs up (the body has been read: what comes now is the
    disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel.set()
            return


async def first_event(job: Job) -> ReplyOpened:
    """The reply core's first word: the prompt is made and fits, or why not."""
    batch = await job.next()
    if batch is None:
        raise HttpError(503, "the reply was cancelled before it started")
    [event] = batch  # it comes alone
    if isinstance(event, Failed):
        raise failure(event.error)
    assert isinstance(event, ReplyOpened)
    if not event.fits:
        job.cancel.set()
        raise HttpError(400, f"request ({event.prompt_tokens} tokens) exceeds the available context size "
                             f"({event.n_ctx} tokens), try increasing it (--ctx)", "exceed_context_size_error",
                        n_prompt_tokens=event.prompt_tokens, n_ctx=event.n_ctx)
    return event


def failure(error: BaseException) -> HttpError:
    """The answer for an exception the engine thread met."""
    if isinstance(error, RequestError | Unsupported):
        return HttpError(400, str(error))
    if isinstance(error, Closed):
        return HttpError(503, str(error))
    if isinstance(error, SpectuiError):  # a template that refuses the messages, a bad grammar, ...
        return HttpError(400, str(error))
    from spectui.crashlog import report

    return HttpError(500, report(error, "answering a request"))


async def events(job: Job) -> AsyncIterator[list[object]]:
    """The job's events in batches: whatever has arrived since the last batch."""
    while True:
        arrived = [await job.next()]
        while not job.events.empty():
            arrived.append(job.events.get_nowait())
        items = [event for batch in arrived if batch is not None for event in batch]
        if items:
            yield items
        if None in arrived:
            return


async def collect(job: Job) -> tuple[ReplyDone, list[ReplyPiece], list]:
    done, pieces, entries = None, [], []
    async for batch in events(job):
        for event in batch:
            if isinstance(event, Failed):
                raise failure(event.error)
            if isinstance(event, ReplyPiece):
                pieces.append(event)
            elif isinstance(event, ReplyLogprobs):
                entries.extend(event.entries)
            elif isinstance(event, ReplyDone):
                done = event
    if done is None:
        raise HttpError(503, "the reply was cancelled")
    if done.reason == "worker":
        raise HttpError(500, done.message)
    return done, pieces, entries


def spoken(entries: list, done: ReplyDone, before: int = 0) -> list:
    """The log-probabilities of the tokens the reply kept (a stop string's are dropped);
    `before`: bytes of the reply's tokens already accounted for."""
    limit, position, kept = len(done.raw_text.encode("utf-8")), before, []
    for entry in entries:
        if position >= limit:
            break
        kept.append(entry)
        position += len(entry.data)
    return kept


def whole_response(completion: responses.Completion, done: ReplyDone, pieces: list[ReplyPiece], entries: list,
                   return_tokens: bool) -> dict[str, Any]:
    figures = done.figures
    entries = spoken(entries, done)
    if completion.chat:
        message: dict[str, Any] = {"role": "assistant", "content": done.text}
        if done.reasoning:
            message["reasoning_content"] = done.reasoning
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": responses.finish_reason(figures),
                                  "logprobs": {"content": responses.logprobs_content(entries)} if entries else None}
    else:
        choice = {"index": 0, "text": "".join(p.text for p in pieces),
                  "finish_reason": responses.finish_reason(figures),
                  "logprobs": responses.completion_logprobs(entries) if entries else None}
    extra: dict[str, Any] = {"usage": responses.usage(figures), "timings": responses.timings(figures)}
    if return_tokens:
        extra["tokens"] = list(done.tokens)
    return completion.envelope([choice], **extra)


# ----- streams --------------------------------------------------------------------------------------


async def stream_chat(job: Job, completion: responses.Completion, include_usage: bool) -> AsyncIterator[bytes]:
    """`data: {chunk}` lines: the role first, then content / reasoning_content deltas, the finish,
    usage when asked for, `[DONE]`."""
    sent = 0  # bytes of the tokens whose log-probabilities were sent
    try:
        yield responses.sse(completion.delta({"role": "assistant", "content": None}))
        async for batch in events(job):
            for kind, text, entries, done in merged(batch):
                if done is not None:
                    for chunk in closing(completion, done, spoken(entries, done, sent), include_usage):
                        yield chunk
                elif kind is not None:
                    key = "reasoning_content" if kind == "thinking" else "content"
                    yield responses.sse(completion.delta({key: text}, entries))
                sent += sum(len(e.data) for e in entries)
        yield responses.sse("[DONE]")
    except StreamFailure as failed:  # the status line is out: the error goes as an event
        yield responses.sse(responses.error_body(failed.error.status, str(failed.error), failed.error.kind))
    finally:
        job.cancel.set()  # the client hung up (or the stream ended): the reply stops


async def stream_text(job: Job, completion: responses.Completion, include_usage: bool) -> AsyncIterator[bytes]:
    """A text completion's chunks: text pieces, the finish, usage when asked for, `[DONE]`."""
    offset, sent = 0, 0
    try:
        async for batch in events(job):
            for kind, text, entries, done in merged(batch):
                if done is not None:
                    for chunk in closing(completion, done, spoken(entries, done, sent), include_usage, offset):
                        yield chunk
                elif kind is not None:
                    yield responses.sse(completion.text_piece(text, entries, offset))
                    offset += len(text)
                sent += sum(len(e.data) for e in entries)
        yield responses.sse("[DONE]")
    except StreamFailure as failed:
        yield responses.sse(responses.error_body(failed.error.status, str(failed.error), failed.error.kind))
    finally:
        job.cancel.set()


def merged(batch: list[object]) -> list[tuple[str | None, str, list, ReplyDone | None]]:
    """A batch of events as chunks to send: runs of answer (or of thinking) text joined, the
    log-probabilities that arrived with them, and the end. An error becomes an SSE error event."""
    out: list[tuple[str | None, str, list, ReplyDone | None]] = []
    entries: list = []
    for event in batch:
        if isinstance(event, Failed):
            raise StreamFailure(failure(event.error))
        if isinstance(event, ReplyLogprobs):
            entries.extend(event.entries)
        elif isinstance(event, ReplyPiece):
            kind = "thinking" if event.thinking else "answer"
            if out and out[-1][0] == kind and out[-1][3] is None:
                out[-1] = (kind, out[-1][1] + event.text, out[-1][2], None)
            else:
                out.append((kind, event.text, [], None))
            out[-1][2].extend(entries)
            entries = []
        elif isinstance(event, ReplyDone):
            out.append((None, "", entries, event))
            entries = []
    if entries:
        out.append((None, "", entries, None))
    return out


class StreamFailure(Exception):
    def __init__(self, error: HttpError) -> None:
        super().__init__(str(error))
        self.error = error


def closing(completion: responses.Completion, done: ReplyDone, entries: list, include_usage: bool,
            offset: int = 0) -> list[bytes]:
    """The last chunks: the finish (with timings unless a usage chunk follows), then usage."""
    if done.reason == "worker":
        return [responses.sse(responses.error_body(500, done.message))]
    figures = done.figures
    finish = responses.finish_reason(figures)
    if completion.chat:
        last = completion.delta({}, entries, finish)
    else:
        last = completion.text_piece("", entries, offset, finish)
    chunks = [last]
    if include_usage:
        chunks.append(completion.chunk([], usage=responses.usage(figures)))
    chunks[-1]["timings"] = responses.timings(figures)
    return [responses.sse(chunk) for chunk in chunks]
