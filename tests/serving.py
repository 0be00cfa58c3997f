"""`spectui serve` started for a test: the real server (the CLI's own parsing, loading and
uvicorn), in this process on a free port, so a test can also look at its state or patch the
engine. `tests/test_serve_cli.py` starts it as a separate process instead."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from spectui.cli import build_parser
from spectui.serve.app import ServerState
from spectui.serve.command import bind, build_server, finish, prepare

DEADLINE = 60.0


@dataclass
class Served:
    url: str
    """The server's root, e.g. http://127.0.0.1:40123 (the OpenAI base URL is url + "/v1")."""
    state: ServerState
    api_key: str | None = None

    def client(self, **kwargs: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key or "none", max_retries=0, **kwargs)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=DEADLINE)


@contextmanager
def served(target: Path, draft: Path | None = None, *options: str, api_key: str | None = None) -> Iterator[Served]:
    """`spectui serve --target T [--draft D] OPTIONS --port 0 --no-warm-up`, running until the block ends."""
    argv = ["serve", "--target", str(target), "--port", "0", "--no-warm-up", "--threads", "2", *options]
    if draft is not None:
        argv += ["--draft", str(draft)]
    args = build_parser().parse_args(argv)
    sock = bind(args.host, args.port)
    loading = prepare(args, api_key)
    state = finish(loading)
    server = build_server(args, loading)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("the server did not start")
        time.sleep(0.01)
    host, port = sock.getsockname()[:2]
    try:
        yield Served(f"http://{host}:{port}", state, api_key)
    finally:
        server.should_exit = True
        thread.join(DEADLINE)
        sock.close()


@contextmanager
def served_at_home(home: Path, target: Path, draft: Path | None = None, *options: str,
                   api_key: str | None = None) -> Iterator[Served]:
    """`served`, with SPECTUI_HOME at `home` while it runs (a module's server keeps its own home)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECTUI_HOME", str(home))
        with served(target, draft, *options, api_key=api_key) as running:
            yield running
