"""A reply's job on the engine thread, as a request's route sees it: put in line, its first word
(the prompt fits, or why not), and stopped when the client hangs up (`app.whole`, `app.streamed`)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from spectui.serve.responses import HttpError, failure
from spectui.serve.slot import Busy, Closed, Failed, Job, ReplySlot
from spectui.session.loaded import BuildRequest
from spectui.session.reply import ReplyOpened


def submit(slot: ReplySlot, build: BuildRequest, on_busy: Callable[[], None]) -> Job:
    """The reply's job, in line on the engine thread; a 503 when the line is full (`on_busy`
    counts it) or the server is closing."""
    try:
        return slot.submit(build)
    except Busy as error:
        on_busy()
        raise HttpError(503, str(error), headers={"Retry-After": str(error.retry_after)}) from None
    except Closed as error:
        raise HttpError(503, str(error)) from None


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
