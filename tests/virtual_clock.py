"""A virtual clock for tests whose decisions rest on measured seconds (K = auto, its guard, the
heads' measured order): time moves only when a test double's pass moves it, so every figure is
exact and no decision depends on how busy the machine is."""

from __future__ import annotations

import time

import pytest

from spectui.engine.llama import hostcost


class Clock:
    """Virtual seconds: moved only by the doubles' passes."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def install(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A fresh clock as the step's `time.perf_counter` and the loop's `hostcost.now`."""
    virtual = Clock()
    monkeypatch.setattr(time, "perf_counter", virtual)  # the step's draft and verify seconds
    monkeypatch.setattr(hostcost, "now", virtual)  # the loop's cycle seconds
    return virtual
