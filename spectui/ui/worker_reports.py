"""What the engine's thread workers (`EngineHost`, `spectui.ui.engine_host`) report with: the
reply batcher, the progress throttle, the pull's tqdm, the line for an error they did not expect.

Every engine call (llama.cpp, the engine's file and network checks) runs on a worker thread,
never on the UI thread (tests/test_ui_threads.py holds the app to it). Each worker checks
`get_current_worker().is_cancelled` (Textual sets it on quit, or when an exclusive worker of the
same group replaces it) and reports only by posting the messages of `spectui.ui.messages`.
"""

from __future__ import annotations

import copy
import io
import threading
import time
from collections.abc import Callable
from typing import Any

from textual.message import Message
from tqdm import tqdm

from spectui.engine.events import CycleStats, GenerationStats, Progress
from spectui.session.reply import ReplyDone, ReplyEvent, ReplyPiece
from spectui.ui.messages import LoadProgress, ReplyBatch, ReplyFinished, ReplyPurpose

UPDATE_INTERVAL = 0.1  # seconds between ReplyBatch messages: ~10 screen updates a second
SLOWEST_UPDATES = 0.5
"""The longest the pace (`UpdatePace`) leaves between a reply's screen updates."""
UI_SHARE = 0.1
"""The share of one core the UI thread may spend while a reply streams before updates slow."""
PROGRESS_INTERVAL = 0.1
Post = Callable[[Message], object]


def unexpected(error: Exception, doing: str) -> str:
    """The one line for an exception a worker did not expect; its traceback goes to a log file
    (a file or disk problem gets its own line, without a log)."""
    from spectui.crashlog import describe_os_error, report

    if isinstance(error, OSError) and (line := describe_os_error(error)):
        return line
    return report(error, doing)


class UpdatePace:
    """How often a streaming reply's batches reach the screen: every `fastest` seconds while the
    UI thread spends under `share` of a core, less often (up to `slowest`) as drawing costs more.

    Each batch makes Textual lay out and redraw the screen, the chat's every block included, so
    the cost grows with the chat: measured in the app on 2 cores (docs/BENCHMARKS.md, "The app's
    own cost"), 10 updates a second took 44-64 % of a core by the third reply and the model,
    whose threads wait for the core the UI took, decoded at 11-27 tok/s instead of 34-38. The
    UI thread's own CPU time (`time.thread_time`) between batches says what they cost here.

    `observe` runs on the UI thread at each batch; the reply's worker reads `interval` (a float
    written whole: no lock needed)."""

    def __init__(self, fastest: float = UPDATE_INTERVAL, slowest: float = SLOWEST_UPDATES,
                 share: float = UI_SHARE, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self.fastest, self.slowest, self.share = fastest, max(fastest, slowest), share
        self.clock, self.cpu = clock, cpu
        """Wall time, and the CPU time of the thread that calls `observe` (the UI's)."""
        self.interval = fastest
        self._last: tuple[float, float] | None = None
        """(wall clock, UI thread CPU time) at the last batch of this reply."""

    def start_reply(self) -> None:
        """A reply starts: the idle time before it says nothing of what drawing it costs."""
        self._last = None

    def observe(self) -> None:
        wall, cpu = self.clock(), self.cpu()
        if self._last is not None and (elapsed := wall - self._last[0]) > 0:
            used = (cpu - self._last[1]) / elapsed
            wanted = self.interval * used / self.share  # the interval at which that cost is `share`
            self.interval = min(self.slowest, max(self.fastest, (self.interval + wanted) / 2))
        self._last = (wall, cpu)


class ReplyBatcher:
    """Collects a reply's events and posts them in batches a few times a second (at `pace`'s
    interval when given, else every `interval` seconds)."""

    def __init__(self, post: Post, purpose: ReplyPurpose, interval: float = UPDATE_INTERVAL,
                 pace: UpdatePace | None = None) -> None:
        self.post = post
        self.purpose = purpose
        self._interval = interval
        self.pace = pace
        self.pieces: list[ReplyPiece] = []
        self.streamed: list[ReplyPiece] = []
        """Every piece of the reply so far, posted or not (what a quit saves)."""
        self.done = threading.Event()
        """Set once the reply has ended (its last message is posted)."""
        self.cycles: list[CycleStats] = []
        self.totals: GenerationStats | None = None
        self.any_cycle = False
        self.all_plain = True
        self._last_post = time.monotonic()

    def add(self, event: ReplyEvent) -> None:
        if isinstance(event, ReplyPiece):
            self.pieces.append(event)
            self.streamed.append(event)
        elif isinstance(event, Progress):
            self.cycles.append(event.cycle)
            self.totals = event.totals
            self.any_cycle = True
            self.all_plain = self.all_plain and event.cycle.k == 0
        elif isinstance(event, ReplyDone):
            self.flush()
            speculation_off = self.any_cycle and self.all_plain
            self.post(ReplyFinished(self.purpose, event, speculation_off))
            self.done.set()
            return
        first_text = isinstance(event, ReplyPiece) and len(self.streamed) == 1  # shown at once, whatever the pace
        if first_text or time.monotonic() - self._last_post >= self.interval:
            self.flush()

    @property
    def interval(self) -> float:
        return self.pace.interval if self.pace is not None else self._interval

    def split(self) -> tuple[str, str]:
        """Everything streamed so far as (answer, reasoning), as the reply's widget shows it."""
        pieces = list(self.streamed)
        answer = "".join(piece.text for piece in pieces if not piece.thinking)
        reasoning = "".join(piece.text for piece in pieces if piece.thinking).strip()
        return answer, reasoning

    def flush(self) -> None:
        if self.pieces or self.cycles:
            totals = copy.deepcopy(self.totals)
            self.post(ReplyBatch(self.purpose, tuple(self.pieces), tuple(self.cycles), totals))
        self.pieces, self.cycles = [], []
        self._last_post = time.monotonic()


class Throttle:
    """Calls through at most once per `interval`, plus always at fraction 1.0."""

    def __init__(self, post: Post, label: str, interval: float = PROGRESS_INTERVAL,
                 cancelled: Callable[[], bool] = lambda: False) -> None:
        self.post, self.label, self.interval = post, label, interval
        self.cancelled = cancelled
        self._last = 0.0

    def __call__(self, fraction: float) -> bool:
        """Post the progress; False (stop loading) once the worker is cancelled."""
        now = time.monotonic()
        if fraction >= 1.0 or now - self._last >= self.interval:
            self._last = now
            self.post(LoadProgress(self.label, fraction))
        return not self.cancelled()


def tqdm_posting(post: Post, is_cancelled: Callable[[], bool]) -> type[tqdm[Any]]:
    """A tqdm class for huggingface_hub that posts progress instead of printing it."""

    class UiTqdm(tqdm):  # type: ignore[type-arg]  # generic in its stubs only: `tqdm[Any]` fails at run time
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.update(file=io.StringIO(), disable=False)
            super().__init__(*args, **kwargs)
            self._throttle = Throttle(post, f"downloading {self.desc or 'model'}")

        def update(self, n: float | None = 1) -> bool | None:
            if is_cancelled():
                raise InterruptedError("pull cancelled")
            shown = super().update(n)
            if self.total:
                self._throttle(min(self.n / self.total, 1.0))
            return shown

    return UiTqdm

