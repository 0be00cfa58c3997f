"""Real `spectui worker` subprocesses on 127.0.0.1 for the tests that split the target over them."""

from __future__ import annotations

import socket

from spectui.worker import WorkerProcess, spawn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_worker(host: str = "127.0.0.1") -> WorkerProcess:
    """A `spectui worker` subprocess on a free port, ready once it answers a handshake."""
    return spawn(host, free_port(), threads=1)
