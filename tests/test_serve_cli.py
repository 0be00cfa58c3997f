"""`spectui serve` as a user runs it: a separate process, its one-line refusals, and Ctrl+C
(SIGINT) that lets the reply under way finish, then exits 0 with the models freed."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

DEADLINE = 60.0


def spectui(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "spectui", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    _out, err = process.communicate(timeout=DEADLINE)
    return process.returncode, err


def test_a_public_address_without_an_api_key_is_refused_before_loading(tiny_pair, spectui_home) -> None:
    code, err = finished(spectui("serve", "--host", "0.0.0.0", "--target", str(tiny_pair.target)))
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "--host 0.0.0.0" in err and "--api-key" in err and "SPECTUI_API_KEY" in err
    assert "loading" not in err


def test_a_port_in_use_is_one_line(tiny_pair, spectui_home) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, err = finished(spectui("serve", "--port", str(port), "--target", str(tiny_pair.target)))
    assert code == 1 and f"port {port}" in err and "--port" in err and "Traceback" not in err


def test_bad_options_are_one_line(tiny_pair, spectui_home) -> None:
    for args, said in [(["--port", "70000"], "--port"), (["--api-key", ""], "--api-key"),
                       (["--max-waiting", "-1"], "--max-waiting"), (["--drain-seconds", "x"], "--drain-seconds")]:
        code, err = finished(spectui("serve", "--target", str(tiny_pair.target), *args))
        assert code == 2 and said in err and err.count("\n") == 1, err


def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """A running `spectui serve --port 0 ...` and its base URL (read from what it prints)."""
    process = spectui("serve", "--port", "0", "--no-warm-up", *args, env=env)
    assert process.stderr is not None
    lines: list[str] = []
    for line in process.stderr:
        lines.append(line)
        if match := re.search(r"on (http://[\d.]+:\d+)/v1", line):
            return process, match.group(1)
    raise AssertionError(f"the server did not start: {''.join(lines)}")


def test_ctrl_c_lets_the_reply_under_way_finish_then_exits_cleanly(tiny_pair, spectui_home: Path) -> None:
    process, url = start("--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft))
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 300, "temperature": 0, "stream": True}
    received: list[str] = []
    with httpx.Client(base_url=url, timeout=DEADLINE) as http, http.stream("POST", "/v1/chat/completions",
                                                                          json=body) as stream:
        lines = stream.iter_lines()
        received.append(next(lines))  # the reply is under way
        process.send_signal(signal.SIGINT)
        reader = threading.Thread(target=lambda: received.extend(lines))
        reader.start()
        reader.join(DEADLINE)
    code, err = finished(process)
    assert code == 0 and "stopping" in err and "stopped" in err and "Traceback" not in err
    assert received[-1] == "data: [DONE]" or received[-2:] == ["data: [DONE]", ""]
    assert any('"finish_reason": "length"' in line for line in received)  # the whole reply, not cut
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


def test_the_api_key_may_come_from_the_environment_and_opens_a_public_address(tiny_pair, spectui_home) -> None:
    process, url = start("--host", "0.0.0.0", "--target", str(tiny_pair.target), env={"SPECTUI_API_KEY": "k3y"})
    try:
        local = url.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(f"{local}/v1/models").status_code == 401
        assert httpx.get(f"{local}/v1/models", headers={"Authorization": "Bearer k3y"}).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        assert finished(process)[0] == 0
