"""The JSON `spectui serve` answers with, in OpenAI's shapes and llama-server's additions.

`usage` (prompt/completion/total tokens, cached prompt tokens) and llama-server's `timings`
(prompt_n, prompt_ms, predicted_n, predicted_ms, per-second rates, draft_n, draft_n_accepted) are
both made from the reply's `ReplyFigures`. Errors are `{"error": {"code", "message", "type"}}`
with llama-server's types (tools/server/server-common.cpp, `format_error_response`).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse

from spectui import __version__
from spectui.errors import SpectuiError
from spectui.serve.convert import RequestError
from spectui.serve.schema import Unsupported
from spectui.serve.slot import Closed
from spectui.session.figures import ReplyFigures
from spectui.session.reply import LogprobEntry, ReplyDone

FINGERPRINT = f"spectui-{__version__}"
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}
"""OpenAI's finish_reason for each of the engine's (a stopped or failed reply ends as `stop`)."""

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "invalid_request_error", 500: "server_error",
               501: "not_supported_error", 503: "unavailable_error"}


def error_body(status: int, message: str, kind: str | None = None, **extra: object) -> dict[str, Any]:
    error: dict[str, Any] = {"code": status, "message": message,
                             "type": kind or ERROR_TYPES.get(status, "server_error")}
    error.update(extra)
    return {"error": error}


class HttpError(Exception):
    """An answer other than 200, in OpenAI's error shape."""

    def __init__(self, status: int, message: str, kind: str | None = None, headers: dict[str, str] | None = None,
                 **extra: object) -> None:
        super().__init__(message)
        self.status, self.kind, self.headers, self.extra = status, kind, headers or {}, extra

    def response(self) -> JSONResponse:
        return JSONResponse(error_body(self.status, str(self), self.kind, **self.extra),
                            status_code=self.status, headers=self.headers)


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


def finish_reason(figures: ReplyFigures) -> str:
    return FINISH_REASONS.get(figures.reason, "stop")


def usage(figures: ReplyFigures) -> dict[str, Any]:
    return {
        "prompt_tokens": figures.prompt_tokens,
        "completion_tokens": figures.tokens,
        "total_tokens": figures.prompt_tokens + figures.tokens,
        "prompt_tokens_details": {"cached_tokens": figures.prompt_cached},
        "completion_tokens_details": {"reasoning_tokens": figures.thinking_tokens},
    }


def timings(figures: ReplyFigures) -> dict[str, Any]:
    """llama-server's timings (server-common.cpp, `server_slot_stats::to_json`): predicted_ms is
    the time after the first token (which the prompt pass made), as llama-server times it."""
    prompt_ms = figures.prompt_seconds * 1000
    predicted_ms = figures.decode_seconds * 1000
    out: dict[str, Any] = {
        "cache_n": figures.prompt_cached,
        "prompt_n": figures.prompt_decoded,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / figures.prompt_decoded if figures.prompt_decoded else 0.0,
        "prompt_per_second": 1000 * figures.prompt_decoded / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": figures.tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / figures.tokens if figures.tokens else 0.0,
        "predicted_per_second": 1000 * figures.tokens / predicted_ms if predicted_ms > 0 else 0.0,
    }
    if figures.drafted:
        out["draft_n"] = figures.drafted
        out["draft_n_accepted"] = figures.accepted
    if figures.held_back:  # spectui's own: K = auto held speculation back, and why
        out["draft_held_n"] = figures.held_cycles
        out["draft_held_reason"] = figures.held_back
    return out


STOP_TYPES = {"eos": "eos", "stop": "word", "length": "limit", "context": "limit"}
"""llama-server's `stop_type` for each of the engine's reasons (tools/server/server-task.cpp)."""


def verbose(done: ReplyDone, prompt: str, model: str) -> dict[str, Any]:
    """llama-server's `__verbose` (`server_task_result_cmpl_final::to_json_non_oaicompat`), less
    its slot and sampling settings: the reply in llama-server's own terms, and the prompt read."""
    figures = done.figures
    return {"index": 0, "content": done.raw_text, "tokens": list(done.tokens), "stop": True, "model": model,
            "tokens_predicted": figures.tokens, "tokens_evaluated": figures.prompt_tokens, "prompt": prompt,
            "has_new_line": "\n" in done.raw_text, "truncated": False,
            "stop_type": STOP_TYPES.get(figures.reason, "none"),
            "tokens_cached": figures.prompt_tokens + figures.tokens, "timings": timings(figures)}


def logprobs_content(entries: list[LogprobEntry] | tuple[LogprobEntry, ...]) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content` (llama-server's shape, with token ids)."""
    return [{"id": e.token, "token": e.text, "bytes": list(e.data), "logprob": e.logprob,
             "top_logprobs": [{"id": t.token, "token": t.text, "bytes": list(t.data), "logprob": t.logprob}
                              for t in e.top]} for e in entries]


def completion_logprobs(entries: list[LogprobEntry], offset: int = 0) -> dict[str, Any]:
    """A text completion's logprobs: llama-server's `content` and the legacy OpenAI lists."""
    offsets, position = [], offset
    for entry in entries:
        offsets.append(position)
        position += len(entry.text)
    return {
        "content": logprobs_content(entries),
        "tokens": [e.text for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t.text: t.logprob for t in e.top} for e in entries],
        "text_offset": offsets,
    }


@dataclass
class Completion:
    """What every chunk and the final response of one request share."""

    model: str
    chat: bool
    id: str = field(default_factory=lambda: "")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(16)

    def envelope(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT, "choices": choices, **extra}

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        body = self.envelope(choices, **extra)
        if self.chat:
            body["object"] = "chat.completion.chunk"
        return body

    def delta(self, delta: dict[str, Any], logprobs: list[LogprobEntry] | None = None,
              finish: str | None = None, logprobs_given: bool = False) -> dict[str, Any]:
        """One streamed chat chunk (`logprobs_given`: the request asked for them, so a chunk
        without any still has `logprobs.content`, empty, as llama-server's)."""
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        if logprobs or logprobs_given:
            choice["logprobs"] = {"content": logprobs_content(logprobs or [])}
        return self.chunk([choice])

    def text_piece(self, text: str, logprobs: list[LogprobEntry] | None = None, offset: int = 0,
                   finish: str | None = None) -> dict[str, Any]:
        """One streamed text-completion chunk."""
        choice = {"index": 0, "text": text, "finish_reason": finish,
                  "logprobs": completion_logprobs(logprobs, offset) if logprobs else None}
        return self.chunk([choice])


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: {json}` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()
