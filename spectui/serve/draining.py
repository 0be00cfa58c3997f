"""uvicorn's server with spectui's Ctrl+C: drain, say so, and return.

uvicorn already stops listening on the first SIGINT or SIGTERM and waits for the connections
under way (up to `timeout_graceful_shutdown`), and a second SIGINT ends them at once. After its
shutdown it raises the signal again, which would end `spectui serve` with a KeyboardInterrupt
and exit code 130; this server does not, so a drained stop is a clean exit.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

HANDLED = (signal.SIGINT, signal.SIGTERM)


class DrainingServer(uvicorn.Server):
    @property
    def interrupted(self) -> bool:
        """Stopped by a signal (rather than by a failure to start)."""
        return bool(self._captured_signals)

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            drain = self.config.timeout_graceful_shutdown
            print(f"spectui serve: stopping; replies under way may finish (at most {drain:g} s, "
                  "Ctrl+C again stops them now)", file=sys.stderr, flush=True)
        super().handle_exit(sig, frame)
