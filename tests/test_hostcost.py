"""A cycle's host time: its wall time less what llama.cpp computed meanwhile, split by part."""

from __future__ import annotations

import threading

import pytest

from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import load_generator
from spectui.engine.llama import hostcost


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_laps_book_each_part_less_the_time_llama_cpp_took_inside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(hostcost, "now", clock)
    laps = hostcost.Laps()
    clock.t = 1.0
    laps.lap("draft")  # 1 s of drafting on the host
    started = hostcost.now()
    clock.t = 3.0
    hostcost.add_llama(started)  # 2 s inside llama.cpp ...
    clock.t = 3.5
    laps.lap("sampling")  # ... within a 2.5 s lap: 0.5 s of it was the host's
    clock.t = 4.0
    laps.restart()  # counted elsewhere: booked nowhere
    clock.t = 4.25
    laps.lap("draft")
    cost = laps.cost()
    assert (cost.draft, cost.sampling, cost.llama, cost.rollback, cost.bookkeeping) == (1.25, 0.5, 2.0, 0.0, 0.0)
    assert cost.host == 1.75
    assert cost.per_cycle_ms(5) == {"host": 350.0, "sampling": 100.0, "draft": 250.0, "rollback": 0.0,
                                    "bookkeeping": 0.0, "llama": 400.0}


def test_each_thread_counts_its_own_llama_time() -> None:
    seen = []

    def other() -> None:
        seen.append(hostcost.in_llama())
        hostcost.add_llama(hostcost.now() - 5.0)

    before = hostcost.in_llama()
    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [0.0] and hostcost.in_llama() == before


def test_a_reply_splits_its_time_between_llama_cpp_and_the_host(tiny_pair) -> None:
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512, n_threads=1)
    try:
        prompt = gen.target.tokenize("in the")
        config = GenerationConfig(max_tokens=24, sampling=SamplingConfig(temperature=0.8, seed=3))
        events = list(gen.generate(prompt, config, DraftControl(3)))
    finally:
        gen.close()
    stats = next(e for e in events if isinstance(e, Finished)).stats
    host = stats.host
    assert stats.target_passes > 3 and host.llama > 0
    assert host.sampling > 0 and host.draft > 0 and host.bookkeeping > 0 and host.rollback >= 0
    # llama.cpp computes only inside the steps, whose wall time decode_seconds adds up; the host's
    # parts of the step (all but the loop's bookkeeping) come out of the same wall time
    step_host = host.sampling + host.draft + host.rollback
    assert host.llama + step_host <= stats.decode_seconds + 1e-6
