"""A reply's events as the HTTP answer: one JSON response, or server-sent events.

The events come from the engine thread in batches (`slot.Job`); whatever has arrived since the
last write goes out together, a run of answer (or thinking) text as one chunk. Once the status
line is out an error can only be an event of the stream (`data: {"error": ...}`), as
llama-server sends it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from spectui.serve import responses
from spectui.serve.responses import HttpError, failure
from spectui.serve.slot import Failed, Job
from spectui.session.reply import LogprobEntry, ReplyDone, ReplyEvent, ReplyLogprobs, ReplyPiece


async def events(job: Job) -> AsyncIterator[list[ReplyEvent | Failed]]:
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


async def collect(job: Job) -> tuple[ReplyDone, list[ReplyPiece], list[LogprobEntry]]:
    done: ReplyDone | None = None
    pieces: list[ReplyPiece] = []
    entries: list[LogprobEntry] = []
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


def spoken(entries: list[LogprobEntry], done: ReplyDone, before: int = 0) -> list[LogprobEntry]:
    """The log-probabilities of the tokens the reply kept (a stop string's are dropped);
    `before`: bytes of the reply's tokens already accounted for."""
    limit, position, kept = len(done.raw_text.encode("utf-8")), before, []
    for entry in entries:
        if position >= limit:
            break
        kept.append(entry)
        position += len(entry.data)
    return kept


def whole_response(completion: responses.Completion, done: ReplyDone, pieces: list[ReplyPiece],
                   entries: list[LogprobEntry], return_tokens: bool) -> dict[str, Any]:
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


def merged(batch: list[ReplyEvent | Failed]) -> list[tuple[str | None, str, list[LogprobEntry], ReplyDone | None]]:
    """A batch of events as chunks to send: runs of answer (or of thinking) text joined, the
    log-probabilities that arrived with them, and the end. An error becomes an SSE error event."""
    out: list[tuple[str | None, str, list[LogprobEntry], ReplyDone | None]] = []
    entries: list[LogprobEntry] = []
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


def closing(completion: responses.Completion, done: ReplyDone, entries: list[LogprobEntry], include_usage: bool,
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
