"""A reply's events as the HTTP answer: one JSON response, or server-sent events.

The events come from the engine thread in batches (`slot.Job`); whatever has arrived since the
last write goes out together, a run of answer (or thinking) text as one chunk. Once the status
line is out an error can only be an event of the stream (`data: {"error": ...}`), as
llama-server sends it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from spectui.chat.tool_parsers import ToolCall
from spectui.serve import responses, tools
from spectui.serve.responses import HttpError, failure
from spectui.serve.slot import Failed, Job
from spectui.session.reply import (
    LogprobEntry,
    ReplyDone,
    ReplyEvent,
    ReplyLogprobs,
    ReplyOpened,
    ReplyPiece,
    ReplyPrompted,
)


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
                   entries: list[LogprobEntry], return_tokens: bool,
                   tool_plan: tools.ToolPlan | None = None, verbose: str | None = None) -> dict[str, Any]:
    """The whole response; `verbose`: the prompt read, for llama-server's `__verbose`."""
    figures = done.figures
    entries = spoken(entries, done)
    if completion.chat:
        message: dict[str, Any] = {"role": "assistant", "content": done.text}
        finish = responses.finish_reason(figures)
        if tool_plan is not None:
            parsed = tools.read(tool_plan, done)
            if parsed.calls:
                message["content"] = parsed.content or None
                message["tool_calls"] = tools.openai_calls(parsed.calls)
                finish = "tool_calls" if finish != "length" else finish  # a later call was cut
        if done.reasoning:
            message["reasoning_content"] = done.reasoning
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish,
                                  "logprobs": {"content": responses.logprobs_content(entries)} if entries else None}
    else:
        choice = {"index": 0, "text": "".join(p.text for p in pieces),
                  "finish_reason": responses.finish_reason(figures),
                  "logprobs": responses.completion_logprobs(entries) if entries else None}
    extra: dict[str, Any] = {"usage": responses.usage(figures), "timings": responses.timings(figures)}
    if return_tokens:
        extra["tokens"] = list(done.tokens)
    if verbose is not None:
        extra["__verbose"] = responses.verbose(done, verbose, completion.model)
    return completion.envelope([choice], **extra)


# ----- streams --------------------------------------------------------------------------------------


async def stream_chat(job: Job, completion: responses.Completion, include_usage: bool,
                      tool_plan: tools.ToolPlan | None = None, logprobs: bool = False,
                      progress: ReplyOpened | None = None) -> AsyncIterator[bytes]:
    """`data: {chunk}` lines: the role first, then content / reasoning_content / tool_calls deltas,
    the finish, usage when asked for, `[DONE]`. With `progress` (llama-server's `return_progress`),
    the role's chunk says how much of the prompt the cache held, and a second one, once the
    prompt is read, that all of it is (`prompt_progress`)."""
    chunks = ChatChunks(completion, tool_plan, logprobs)
    role = {"role": "assistant", "content": None}
    try:
        first = completion.delta(role)
        if progress is not None:
            first["prompt_progress"] = prompt_progress(progress.prompt_tokens, progress.cached_tokens,
                                                       progress.cached_tokens, 0.0)
        yield responses.sse(first)
        async for batch in events(job):
            if (read := prompt_read(batch, progress)) is not None:
                yield responses.sse(completion.delta(role) | {"prompt_progress": read})
            for kind, text, entries, done in merged(batch):
                made = chunks.finish(done, include_usage) if done is not None else chunks.add(kind, text, entries)
                for chunk in made:
                    yield chunk
        yield responses.sse("[DONE]")
    except StreamFailure as failed:  # the status line is out: the error goes as an event
        yield responses.sse(responses.error_body(failed.error.status, str(failed.error), failed.error.kind))
    finally:
        job.cancel.set()  # the client hung up (or the stream ended): the reply stops


def prompt_progress(total: int, cache: int, processed: int, seconds: float) -> dict[str, Any]:
    """llama-server's `prompt_progress` (tools/server/server-task.cpp, `result_prompt_progress`):
    the prompt's tokens, those the cache held, those read so far (the cache's included)."""
    return {"total": total, "cache": cache, "processed": processed, "time_ms": round(seconds * 1000)}


def prompt_read(batch: list[ReplyEvent | Failed], progress: ReplyOpened | None) -> dict[str, Any] | None:
    """The `prompt_progress` of a prompt read in this batch, when the request asked for progress
    and some of the prompt had to be read (all of it cached: the first report said so)."""
    read = next((e for e in batch if isinstance(e, ReplyPrompted)), None)
    if progress is None or read is None or read.prompt_tokens <= read.cached_tokens:
        return None
    return prompt_progress(read.prompt_tokens, read.cached_tokens, read.prompt_tokens, read.seconds)


class ChatChunks:
    """A streamed chat reply's chunks. With log-probabilities, text waits for its tokens' (they
    come just after it) so each chunk carries its own, as llama-server sends them; with tools,
    text goes through `tools.ToolStream` (a call goes out as tool_calls deltas)."""

    def __init__(self, completion: responses.Completion, tool_plan: tools.ToolPlan | None, logprobs: bool) -> None:
        self.completion = completion
        self.pair = logprobs
        self.held: list[tuple[str, str]] = []
        self.entries: list[LogprobEntry] = []
        self.sent = 0
        """Bytes of the tokens whose log-probabilities were sent."""
        self.calls: list[ToolCall] = []
        self.tools: dict[str, tools.ToolStream] = {}
        if tool_plan is not None:
            self.tools["answer"] = tools.ToolStream(tool_plan, self.calls)
            if tool_plan.syntax.reads_raw:  # harmony: a call's header is not an answer marker
                self.tools["thinking"] = tools.ToolStream(tool_plan, self.calls)

    def add(self, kind: str | None, text: str, entries: list[LogprobEntry]) -> list[bytes]:
        if kind is not None:
            self.held.append((kind, text))
        self.entries.extend(entries)
        if not self.held or (self.pair and not self.entries):
            return []  # log-probabilities wait for their text, text for its log-probabilities
        return self._flush(self.entries)

    def _flush(self, entries: list[LogprobEntry]) -> list[bytes]:
        runs: list[tuple[str, str]] = []
        for kind, text in self.held:
            if runs and runs[-1][0] == kind:
                runs[-1] = (kind, runs[-1][1] + text)
            else:
                runs.append((kind, text))
        out = []
        for i, (kind, text) in enumerate(runs):
            out.extend(self._text(kind, text, entries if i == len(runs) - 1 else []))
        self.sent += sum(len(e.data) for e in entries)
        self.held, self.entries = [], []
        return out

    def _text(self, kind: str, text: str, entries: list[LogprobEntry]) -> list[bytes]:
        key = "reasoning_content" if kind == "thinking" else "content"
        stream = self.tools.get(kind)
        if stream is None:
            return [responses.sse(self.completion.delta({key: text}, entries, logprobs_given=self.pair))]
        content, deltas = stream.feed(text)
        return self._tool_chunks(key, content, deltas, entries)

    def _tool_chunks(self, key: str, content: str, deltas: list[dict[str, Any]],
                     entries: list[LogprobEntry]) -> list[bytes]:
        out = []
        if content or entries:
            out.append(responses.sse(self.completion.delta({key: content}, entries, logprobs_given=self.pair)))
        out.extend(responses.sse(self.completion.delta({"tool_calls": [d]})) for d in deltas)
        return out

    def finish(self, done: ReplyDone, include_usage: bool) -> list[bytes]:
        left = spoken(self.entries, done, self.sent)
        out: list[bytes] = []
        if self.held:  # the last text, with the last log-probabilities
            out, left = self._flush(left), []
        for kind, stream in self.tools.items():
            content, deltas = stream.finish()
            out.extend(self._tool_chunks("reasoning_content" if kind == "thinking" else "content", content, deltas, []))
        # llama-server's rule: a reply that hit its limit ends as `length`, a call begun or not
        cut = responses.finish_reason(done.figures) == "length"
        finish = "tool_calls" if self.calls and not cut else None
        return out + closing(self.completion, done, left, include_usage, finish=finish)


async def stream_text(job: Job, completion: responses.Completion, include_usage: bool,
                      progress: ReplyOpened | None = None) -> AsyncIterator[bytes]:
    """A text completion's chunks: text pieces, the finish, usage when asked for, `[DONE]`; with
    `progress`, empty pieces with `prompt_progress` first (`stream_chat`)."""
    offset, sent = 0, 0
    waiting: list[LogprobEntry] = []  # log-probabilities that came before any text of this batch
    try:
        if progress is not None:
            yield responses.sse(completion.text_piece("") | {"prompt_progress": prompt_progress(
                progress.prompt_tokens, progress.cached_tokens, progress.cached_tokens, 0.0)})
        async for batch in events(job):
            if (read := prompt_read(batch, progress)) is not None:
                yield responses.sse(completion.text_piece("") | {"prompt_progress": read})
            for kind, text, entries, done in merged(batch):
                entries, waiting = waiting + entries, []
                if done is not None:
                    for chunk in closing(completion, done, spoken(entries, done, sent), include_usage, offset):
                        yield chunk
                elif kind is None:
                    waiting = entries
                    continue
                else:
                    yield responses.sse(completion.text_piece(text, entries, offset))
                    offset += len(text)
                sent += sum(len(e.data) for e in entries)
        yield responses.sse("[DONE]")
    except StreamFailure as failed:
        yield responses.sse(responses.error_body(failed.error.status, str(failed.error), failed.error.kind))
    finally:
        job.cancel.set()


def merged(batch: list[ReplyEvent | Failed]) -> list[tuple[str | None, str, list[LogprobEntry], ReplyDone | None]]:
    """A batch of events as chunks to send: runs of answer (or of thinking) text joined, each
    with the log-probabilities that came after it (the engine sends a cycle's text, then its
    tokens' log-probabilities), and the end. Log-probabilities before any text of the batch
    come alone (kind None). An error becomes an SSE error event."""
    out: list[tuple[str | None, str, list[LogprobEntry], ReplyDone | None]] = []
    for event in batch:
        if isinstance(event, Failed):
            raise StreamFailure(failure(event.error))
        if isinstance(event, ReplyLogprobs):
            if out and out[-1][3] is None:
                out[-1][2].extend(event.entries)
            else:
                out.append((None, "", list(event.entries), None))
        elif isinstance(event, ReplyPiece):
            kind = "thinking" if event.thinking else "answer"
            last = out[-1] if out else None
            if last is not None and last[0] == kind and last[3] is None and not last[2]:
                out[-1] = (kind, last[1] + event.text, [], None)
            else:
                out.append((kind, event.text, [], None))
        elif isinstance(event, ReplyDone):
            out.append((None, "", [], event))
    return out


class StreamFailure(Exception):
    def __init__(self, error: HttpError) -> None:
        super().__init__(str(error))
        self.error = error


def closing(completion: responses.Completion, done: ReplyDone, entries: list[LogprobEntry], include_usage: bool,
            offset: int = 0, finish: str | None = None) -> list[bytes]:
    """The last chunks: the finish (with timings unless a usage chunk follows), then usage."""
    if done.reason == "worker":
        return [responses.sse(responses.error_body(500, done.message))]
    figures = done.figures
    finish = finish or responses.finish_reason(figures)
    if completion.chat:
        last = completion.delta({}, entries, finish)
    else:
        last = completion.text_piece("", entries, offset, finish)
    chunks = [last]
    if include_usage:
        chunks.append(completion.chunk([], usage=responses.usage(figures)))
    chunks[-1]["timings"] = responses.timings(figures)
    return [responses.sse(chunk) for chunk in chunks]
