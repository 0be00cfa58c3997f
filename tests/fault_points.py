"""Faults injected at a chosen point of a real run: a worker killed, a model file cut or removed.

`Plan` names the point (the load, a baseline run's n-th cycle, a speculative run's n-th cycle,
between two replies) and what happens there; `install(plan)` wraps `Generator.generate` (and the
load's progress) in this process so the fault happens on the thread doing the work, exactly there.
Nothing in spectui knows about it. Used in-process by the app tests, and by `run_with_fault.py`,
which runs a whole `spectui` command in a subprocess with a plan from the environment.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Phase = Literal["load", "baseline", "speculative", "between", "any"]
Action = Literal["kill-worker", "truncate", "truncate-in-decode", "remove", "rewrite", "signal", "pause"]
ENV = "SPECTUI_TEST_FAULT"


@dataclass(frozen=True)
class Plan:
    phase: Phase
    action: Action
    at: int = 1
    """The cycle (1-based) of the first run of that phase; for `between`, after that many replies;
    for `load`, a progress fraction in tenths (5: half way)."""
    worker_pid: int = 0
    worker_port: int = 0
    file: str = ""
    """The model file to cut; for `pause`, the marker file to write (then wait for FILE.go)."""
    signum: int = 0
    """For `signal`: the signal this process sends itself."""

    def to_env(self) -> dict[str, str]:
        return {ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls) -> Plan | None:
        raw = os.environ.get(ENV)
        return cls(**json.loads(raw)) if raw else None


class Injector:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.done = False
        self.replies = 0
        self.fired_at: str = ""

    def fire(self, where: str) -> None:
        if self.done:
            return
        self.done = True
        self.fired_at = where
        print(f"fault fired: {where}", file=sys.stderr, flush=True)
        plan = self.plan
        if plan.action == "kill-worker":
            kill_worker(plan.worker_pid, plan.worker_port)
        elif plan.action in ("truncate", "truncate-in-decode"):
            path = Path(plan.file)
            os.truncate(path, path.stat().st_size // 3)
        elif plan.action == "remove":
            os.remove(plan.file)
        elif plan.action == "rewrite":
            rewrite_in_place(Path(plan.file))
        elif plan.action == "signal":
            os.kill(os.getpid(), plan.signum)
        elif plan.action == "pause":  # hold the reply mid-way while the test acts from outside
            Path(plan.file).write_text(where)
            go = Path(plan.file + ".go")
            deadline = time.monotonic() + 30
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)

    def wrap_events(self, events: Iterator[object], k: object) -> Iterator[object]:
        from spectui.engine.events import Finished, Progress

        plan = self.plan
        phase = "baseline" if k == 0 else "speculative"
        cycles = 0
        for event in events:
            if isinstance(event, Finished):  # a caller may stop reading at it: act before
                self.replies += 1
                if plan.phase == "between" and self.replies == plan.at + first_measured():
                    self.fire(f"after reply {self.replies}")
            yield event
            if isinstance(event, Progress):
                cycles += 1
                if plan.phase in (phase, "any") and cycles == plan.at and self.replies >= first_measured():
                    self.fire(f"{phase} cycle {cycles}")


def first_measured() -> int:
    """Replies before the ones a plan counts in (bench's warm-up run; the app has none)."""
    return int(os.environ.get("SPECTUI_TEST_FAULT_SKIP", "0"))


def kill_worker(pid: int, port: int, timeout: float = 30.0) -> None:
    """SIGKILL a `spectui worker` and wait until its port refuses connections (its sockets are
    closed: the client's next read sees the end)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} still answers on port {port}")


def rewrite_in_place(path: Path) -> None:
    """Change bytes inside the file without changing its size (as a copy of another file of the
    same size would); the modification time moves on."""
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(size // 2)
        file.write(bytes(4096))
    later = time.time_ns() + 10_000_000
    os.utime(path, ns=(later, later))


def _mark_bus_exits(patch: Patch) -> None:
    """Say on stderr when the process ends through the SIGBUS guard (a test tells that path from
    the check before each cycle by it)."""
    from spectui import signals

    exit_now = signals.exit_now

    def marked(line: str, code: int) -> None:
        os.write(2, b"ended by the SIGBUS guard\n")  # the fd: the app captures sys.stderr
        exit_now(line, code)

    patch(signals, "exit_now", marked)


Patch = Callable[[object, str, object], None]


def install(plan: Plan, patch: Patch = setattr) -> Injector:
    """Wrap `Generator.generate` (and, for `load`, the load's progress) to fire `plan`. In a
    test's own process, pass `monkeypatch.setattr` as `patch` so that it is undone."""
    from spectui.engine import generator as generator_module
    from spectui.engine.model.llama_model import LlamaModel

    injector = Injector(plan)
    generate = generator_module.Generator.generate

    def generate_with_fault(self, prompt, config, control=None, cancelled=lambda: False):
        k = control.effective_k() if control is not None else 0
        return injector.wrap_events(generate(self, prompt, config, control, cancelled), k)

    patch(generator_module.Generator, "generate", generate_with_fault)
    if plan.action == "truncate-in-decode":
        patch(LlamaModel, "check_file", lambda self: None)  # let the truncation reach llama.cpp
        _mark_bus_exits(patch)
    if plan.phase == "load":
        load = LlamaModel.load.__func__  # type: ignore[attr-defined]

        def load_with_fault(cls, path, **kwargs):
            progress = kwargs.get("progress")

            def watching(fraction: float) -> bool | None:
                if fraction >= plan.at / 10 and kwargs.get("rpc") is not None:
                    injector.fire(f"load at {fraction:.0%}")
                return progress(fraction) if progress is not None else None

            kwargs["progress"] = watching
            return load(cls, path, **kwargs)

        patch(LlamaModel, "load", classmethod(load_with_fault))
    return injector


SEED = int(os.environ.get("SPECTUI_FAULT_SEED", "30"))
