"""`spectui chat` in a real terminal (a pseudo-terminal, the real Textual driver, its own process)
stopped mid-reply: the terminal closed (SIGHUP), SIGTERM, and a model file truncated while
llama.cpp reads it (a real SIGBUS). Each time the process ends by itself within a bounded wait,
with the right exit code, and the reply streamed so far is in the chat store, marked interrupted.

The fault lands mid-reply by way of tests/fault_points.py (the reply thread acts at its n-th
cycle); the terminal is driven from outside as a person would: type, press Enter, close it.
"""

from __future__ import annotations

import fcntl
import os
import pty
import shutil
import signal
import struct
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
import tiny_gguf
from fault_points import Plan

from spectui.chat.store import ChatStore

TESTS = Path(__file__).parent
WAIT = 120.0


class Terminal:
    """`python tests/run_with_fault.py chat ...` on a 100x30 pseudo-terminal; everything it draws
    is read (so it never blocks on a full terminal) and kept in `screen`."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal
            os.execve(sys.executable, [sys.executable, str(TESTS / "run_with_fault.py"), *args], env)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.screen = bytearray()
        self.closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.code: int | None = None

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen += data

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait_for_screen(self, text: str) -> None:
        deadline = time.monotonic() + WAIT
        while text.encode() not in self.screen:
            assert time.monotonic() < deadline, f"{text!r} never appeared: {bytes(self.screen[-2000:])!r}"
            assert self.poll() is None, f"the app ended early: {bytes(self.screen[-2000:])!r}"
            time.sleep(0.05)

    def close(self) -> None:
        """Close the terminal, as a closed window or a dropped SSH session does (SIGHUP)."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def poll(self) -> int | None:
        if self.code is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
        return self.code

    def wait(self) -> int:
        deadline = time.monotonic() + WAIT
        while self.poll() is None:
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise AssertionError("the app did not end by itself")
            time.sleep(0.05)
        self._reader.join(5)
        self.close()
        assert self.code is not None
        return self.code

    def text(self) -> str:
        return self.screen.decode("utf-8", errors="replace")


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, tmp_path: Path) -> tiny_gguf.TinyPair:
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    shutil.copy(tiny_pair.target, target)
    shutil.copy(tiny_pair.draft, draft)
    return tiny_gguf.TinyPair(target, draft)


def open_chat(pair: tiny_gguf.TinyPair, home: Path, plan: Plan) -> Terminal:
    # the calibration after the load runs three replies before the one the plan counts in
    env = {**os.environ, "SPECTUI_HOME": str(home), "TERM": "xterm-256color", "SPECTUI_TEST_FAULT_SKIP": "3",
           **plan.to_env()}
    env.pop("TEXTUAL", None)
    term = Terminal(["chat", "--target", str(pair.target), "--draft", str(pair.draft), "--threads", "1",
                     "--max-tokens", "2000", "--temperature", "0"], env)
    term.wait_for_screen("ready · ")  # the models are loaded and the baseline measured
    term.type("Tell me a long story")
    term.type("\r")
    return term


def saved_reply(home: Path) -> tuple[str, bool, dict]:
    store = ChatStore(home / "data" / "chats.sqlite3")
    try:
        chat = store.last_chat_id()
        assert chat is not None, "nothing was saved"
        last = store.messages(chat)[-1]
        assert last.role == "assistant"
        return last.content, last.complete, last.stats
    finally:
        store.close()


def test_closing_the_terminal_mid_reply_saves_it_and_ends_the_app(pair, tmp_path):
    marker = tmp_path / "paused"
    home = tmp_path / "home"
    term = open_chat(pair, home, Plan("speculative", "pause", at=6, file=str(marker)))
    deadline = time.monotonic() + WAIT
    while not marker.exists():
        assert time.monotonic() < deadline and term.poll() is None, term.text()[-2000:]
        time.sleep(0.05)
    term.close()  # SIGHUP to the app, mid-reply
    time.sleep(0.5)
    Path(f"{marker}.go").write_text("")  # the reply thread may go on: it finds the app stopping
    assert term.wait() == 128 + signal.SIGHUP
    content, complete, stats = saved_reply(home)
    assert content and not complete and stats.get("reason") == "interrupted"


def test_sigterm_mid_reply_saves_it_and_exits_143(pair, tmp_path):
    home = tmp_path / "home"
    term = open_chat(pair, home, Plan("speculative", "signal", at=6, signum=int(signal.SIGTERM)))
    assert term.wait() == 128 + signal.SIGTERM
    content, complete, stats = saved_reply(home)
    assert content and not complete and stats.get("reason") == "interrupted"
    assert "interrupted (SIGTERM); the reply in progress was saved (spectui chat --resume reopens it)" in term.text()


def test_a_model_file_truncated_under_llama_cpp_mid_reply_is_one_line_and_the_reply_is_kept(pair, tmp_path):
    home = tmp_path / "home"
    term = open_chat(pair, home, Plan("speculative", "truncate-in-decode", at=6, file=str(pair.target)))
    assert term.wait() == 1
    screen = term.text()
    assert "ended by the SIGBUS guard" in screen
    assert ("spectui: target.gguf was truncated on disk after it was loaded" in screen
            and "put the file back (or pull the pair again), then run the command again" in screen), screen[-1500:]
    assert "Bus error" not in screen and "Traceback" not in screen
    assert "\x1b[?1049l" in screen  # the terminal was given back (the alternate screen left)
    content, complete, stats = saved_reply(home)
    assert content and not complete and stats.get("reason") == "interrupted"  # what the reply thread had streamed
