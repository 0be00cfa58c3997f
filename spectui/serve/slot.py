"""One reply at a time on the loaded pair, a bounded queue of the rest, and the bridge from the
engine thread to the event loop.

llama.cpp is blocking and its context is not thread-safe, so every reply (and every llama.cpp
call a request needs: tokenizing, the chat template, a grammar) runs on one engine thread. The
event loop only hands it jobs and reads their events from an `asyncio.Queue`
(`loop.call_soon_threadsafe`), so it never waits on llama.cpp. The models are loaded and warmed
up on that same thread too (`call`): llama.cpp's CPU backend runs each calling thread's work on
that thread's own OpenMP team, and a second team that stays alive (the main thread's, had it
loaded the models) competes with the first for the cores; measured on the demo pair, 2 cores:
replies on another thread than the load's decoded at 41 tok/s against 230. Short calls that only
read the model (`ask`: tokenizing, a chat template) run there too, between two cycles of the reply,
not behind the replies in line. Events cross once per cycle, as
one batch (the pieces of the tokens a cycle accepted), not one by one: each crossing wakes the
loop, which then competes with the engine for the GIL and, on a small CPU, with llama.cpp's
threads for the cores. A request that finds the slot busy
waits in line; when `max_waiting` are already waiting it is refused (`Busy`, HTTP 503 with
Retry-After). Each job carries a `threading.Event` its client's disconnect (or the server's
shutdown) sets: the reply checks it every cycle, and a job whose client left while it waited
never starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from spectui.engine.events import Progress
from spectui.session.loaded import BuildRequest, EngineSession, NotLoaded
from spectui.session.reply import ReplyDone, ReplyEvent, ReplyOpened, ReplyPiece, ReplyPrompted

QUICK_WAITING = 16
"""Short calls (`ReplySlot.ask`) that may wait for the engine thread, or `--max-waiting` if more."""
REPLY_SECONDS_GUESS = 10.0
"""What a reply is assumed to take before one has been timed (for Retry-After)."""


class Busy(Exception):
    """The slot is taken and the queue is full; `retry_after` seconds is a fair wait."""

    def __init__(self, retry_after: int, waiting: int) -> None:
        super().__init__(f"the server is busy: {waiting} request(s) are already waiting for the model; "
                         f"retry in {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The server is shutting down and takes no new replies."""


@dataclass
class Failed:
    """A job ended in an exception on the engine thread (the request or the reply failed)."""

    error: BaseException


@dataclass(eq=False)
class Job:
    build: BuildRequest
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[list[ReplyEvent | Failed] | None] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def post(self, item: list[ReplyEvent | Failed] | None) -> None:
        """Hand a batch of events to the event loop (from the engine thread); None: the end."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.cancel.set()

    async def next(self) -> list[ReplyEvent | Failed] | None:
        """The next batch of events; None once the job has ended."""
        return await self.events.get()


T = TypeVar("T")


@dataclass(eq=False)
class Call:
    """Work for the engine thread that is not a reply."""

    work: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    answer: asyncio.Future[Any] | None = None
    """For `ReplySlot.ask`: the event loop's future the outcome goes to."""

    def run(self) -> None:
        if self.done.is_set():  # a quick call is queued twice (`ReplySlot.ask`): it runs once
            return
        try:
            self.result = self.work()
        except BaseException as error:  # handed to the caller waiting in `ReplySlot.call`
            self.error = error
        finally:
            self.done.set()
            if self.answer is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                    self.answer.get_loop().call_soon_threadsafe(_settle, self.answer, self.result, self.error)


def _settle(answer: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if answer.done():  # its request went away
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(result)


class ReplySlot:
    """The engine thread and its line of jobs."""

    def __init__(self, session: EngineSession, max_waiting: int = 8,
                 on_done: Callable[[ReplyDone], None] | None = None) -> None:
        self.session = session
        self.max_waiting = max_waiting
        self.on_done = on_done
        self._jobs: queue.Queue[Job | Call | None] = queue.Queue()
        self._quick: queue.Queue[Call] = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self._closed = False
        self._live: set[Job] = set()
        self._reply_seconds = REPLY_SECONDS_GUESS
        self._thread = threading.Thread(target=self._work, name="spectui-engine", daemon=True)
        self._thread.start()

    # ----- the event loop's side ---------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Requests in line behind the running one."""
        with self._lock:
            return max(self._pending - 1, 0)

    @property
    def running(self) -> int:
        with self._lock:
            return min(self._pending, 1)

    def submit(self, build: BuildRequest) -> Job:
        """Queue a reply; `Busy` when the line is full, `Closed` while shutting down."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise Closed("the server is shutting down")
            if self._pending > self.max_waiting:
                raise Busy(max(1, math.ceil(self._reply_seconds * (self._pending - 1) + 1)), self._pending - 1)
            self._pending += 1
            job = Job(build, loop)
            self._live.add(job)
        self._jobs.put(job)
        return job

    def call(self, work: Callable[[], T]) -> T:
        """Run `work` on the engine thread, wait for it and return what it returns (or raise what
        it raised): loading, warming up and freeing the models."""
        call = Call(work)
        self._jobs.put(call)
        call.done.wait()
        if call.error is not None:
            raise call.error
        result: T = call.result  # what `work` returned
        return result

    def ask(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Run short work that reads the model (tokenizing, a chat template: never a decode) on
        the engine thread, without waiting for the replies in line: between two cycles of the
        running reply, or at once when there is none. `Busy` when `QUICK_WAITING` (or `max_waiting`)
        such calls are already waiting, `Closed` while shutting down."""
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        call = Call(work, answer=answer)
        with self._lock:
            if self._closed:
                raise Closed("the server is shutting down")
            if self._quick.qsize() >= max(QUICK_WAITING, self.max_waiting):
                raise Busy(1, self._quick.qsize())
            self._quick.put(call)
            self._jobs.put(call)  # wakes an idle engine thread; whichever queue reaches it first runs it
        return answer

    def _run_quick(self) -> None:
        while True:
            try:
                call = self._quick.get_nowait()
            except queue.Empty:
                return
            call.run()

    def close(self, timeout: float = 10.0, last: Callable[[], Any] | None = None) -> bool:
        """Refuse new jobs, stop every running and waiting one, run `last` on the engine thread
        (freeing the models), and wait for the thread; False when that took over `timeout`."""
        with self._lock:
            self._closed = True
            for job in self._live:
                job.cancel.set()
        if last is not None:
            self._jobs.put(Call(last))
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ----- the engine thread -----------------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            if isinstance(job, Call):
                job.run()
                self._run_quick()
                continue
            started = time.monotonic()
            last: list[ReplyEvent | Failed] = []
            try:
                if not job.cancel.is_set():
                    job.started.set()
                    last = self._run(job)
            finally:
                # The slot is free before anyone hears that the reply ended: a client that asks
                # again as soon as it has its answer (or its 400) must find it free, not busy.
                with self._lock:
                    self._pending -= 1
                    self._live.discard(job)
                    if job.started.is_set():  # the last few replies decide the wait a refusal suggests
                        self._reply_seconds = 0.7 * self._reply_seconds + 0.3 * (time.monotonic() - started)
                self._finish(job, last)

    def _finish(self, job: Job, last: list[ReplyEvent | Failed]) -> None:
        """Tell `on_done` and then the client (the last events, then the end)."""
        try:
            done = [event for event in last if isinstance(event, ReplyDone)]
            if done and self.on_done is not None:
                self.on_done(done[0])
        except Exception as error:  # reported to the request's handler, which answers with it
            last = [*last, Failed(error)]
        finally:
            if last:
                job.post(last)
            job.post(None)

    def _run(self, job: Job) -> list[ReplyEvent | Failed]:
        """Run the reply, posting its events as they come, all but the last batch (the one with
        its end, `ReplyDone` or `Failed`), which is returned."""
        batch: list[ReplyEvent | Failed] = []
        first_text = True
        try:
            for event in self._events(job):
                if isinstance(event, Progress):  # a cycle ended: what it made goes out together
                    if batch:
                        job.post(batch)
                        batch = []
                    self._run_quick()
                    continue
                batch.append(event)
                if isinstance(event, ReplyDone):
                    continue  # held until the slot is free (`_work`)
                # the prompt's verdict and the first text (the time to first token) go at once
                if isinstance(event, ReplyOpened | ReplyPrompted) or (isinstance(event, ReplyPiece) and first_text):
                    first_text = first_text and not isinstance(event, ReplyPiece)
                    job.post(batch)
                    batch = []
        except Exception as error:  # reported to the request's handler, which answers with it
            return [*batch, Failed(error)]
        return batch

    def _events(self, job: Job) -> Iterator[ReplyEvent]:
        """The job's reply, its request built under the session's lock (`EngineSession.reply_to`)."""
        try:
            yield from self.session.reply_to(job.build, job.cancel.is_set)
        except NotLoaded:
            raise Closed("no model is loaded") from None
