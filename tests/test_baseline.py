"""The baseline stays comparable: its age and the machine's load decide when a reply re-measures it
with a probe, a short reply shows no ratio, and the machine meter and thread choice are sane."""

from __future__ import annotations

from datetime import datetime, timedelta

from spectui.engine.events import CycleStats, GenerationStats
from spectui.session import machine
from spectui.session.baseline import (
    OWN_CYCLES_SOURCE,
    OWN_CYCLES_TOKENS,
    PROBE_TOKENS,
    Baseline,
    baseline_probe,
    from_plain_cycles,
    from_stats,
)
from spectui.ui.stats_panel import MIN_MEASURED_TOKENS, figures

NOW = datetime(2026, 11, 23, 12, 0)


def baseline(minutes_ago: float = 0, others: float | None = 0.1) -> Baseline:
    return Baseline(40.0, 32, "calibration after load", NOW - timedelta(minutes=minutes_ago), others_load=others)


def test_a_fresh_baseline_under_the_same_load_is_kept():
    assert not baseline(2).is_stale(0.2, now=NOW)
    assert baseline_probe(baseline(0), None, now=NOW) == 0  # load unknown: age alone decides
    assert baseline_probe(baseline(11), None, now=NOW) == PROBE_TOKENS


def test_an_old_baseline_or_a_changed_load_calls_for_a_probe():
    assert baseline(11).is_stale(0.1, now=NOW)
    assert baseline(1).is_stale(1.0, now=NOW)  # another program now takes a core
    assert baseline(1, others=1.2).is_stale(0.1, now=NOW)  # ... or has stopped
    assert baseline_probe(baseline(0, others=1.2), 0.0, now=NOW) == PROBE_TOKENS
    assert baseline_probe(None, 0.0) == PROBE_TOKENS


def test_the_panel_says_how_old_the_baseline_is():
    assert "(just now)" in baseline(0.2).describe(now=NOW)
    assert "(12 min ago)" in baseline(12).describe(now=NOW)
    assert "min ago" not in baseline(12).describe(with_time=False, now=NOW)


def test_a_probe_becomes_the_baseline_and_a_short_probe_does_not():
    probed = GenerationStats(probe_tokens=16, probe_seconds=0.5, decode_tokens=100, decode_seconds=1.0)
    fresh = from_stats(probed, "probe at this reply's start", others_load=0.3)
    assert fresh is not None and fresh.tokens_per_second == 32.0 and fresh.tokens == 16
    assert fresh.others_load == 0.3
    assert from_stats(GenerationStats(probe_tokens=3, probe_seconds=0.1), "probe") is None


def test_a_reply_too_short_to_measure_shows_no_ratio():
    short = GenerationStats(decode_tokens=MIN_MEASURED_TOKENS - 1, decode_seconds=0.2, prompt_tokens=9,
                            prompt_seconds=0.05, target_passes=5)
    rows = dict(figures(short, baseline()))
    assert rows["speedup"].startswith("— (too short to measure")
    assert rows["first token"] == "0.05 s (9 prompt tok)"
    long = GenerationStats(decode_tokens=MIN_MEASURED_TOKENS + 20, decode_seconds=0.5, target_passes=10)
    assert dict(figures(long, baseline()))["speedup"] == "1.80x"


def test_threads_follow_the_cores_other_programs_leave_free():
    assert machine.default_threads(0.0, cores=2) == 2
    assert machine.default_threads(0.3, cores=2) == 2
    assert machine.default_threads(0.9, cores=2) == 1
    assert machine.default_threads(3.5, cores=2) == 1
    assert machine.default_threads(1.2, cores=8) == 7  # 6.8 cores free: the 7th is 80 % free
    assert machine.default_threads(1.5, cores=8) == 6
    assert machine.default_threads(None, cores=4) == 4


def test_the_meter_counts_other_programs_and_not_this_one(tmp_path, monkeypatch):
    """/proc/stat's busy ticks minus this process's own: what other programs used, in cores."""
    stat, self_stat = tmp_path / "stat", tmp_path / "self_stat"
    monkeypatch.setattr(machine, "STAT", stat)
    monkeypatch.setattr(machine, "SELF_STAT", self_stat)
    clock = [100.0]
    monkeypatch.setattr(machine.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(machine.os, "sysconf", lambda name: 100)  # 100 ticks a second

    def write(user: int, idle: int, own: int) -> None:
        stat.write_text(f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 ...\n")
        self_stat.write_text(f"42 (py (thon)) R {' '.join(['0'] * 10)} {own} 0 0 0\n")

    write(user=1000, idle=5000, own=100)
    meter = machine.LoadMeter()
    clock[0] += 2.0  # 2 s = 400 ticks on 2 cores
    write(user=1000 + 300, idle=5000 + 100, own=100 + 180)  # 300 busy ticks, 180 of them ours
    assert meter.others() == 0.6  # (300 - 180) / 200 ticks a second
    clock[0] += 1.0
    write(user=1300, idle=5300, own=280)
    assert meter.others() == 0.0


# ----- a reply's own 1-row passes as its baseline ---------------------------------------------


def plain(seconds: float = 0.025, draft_seconds: float = 0.0) -> CycleStats:
    return CycleStats(0, 0, 0, 1, seconds, draft_seconds=draft_seconds)


def drafted(seconds: float = 0.060) -> CycleStats:
    return CycleStats(4, 4, 2, 3, seconds, "model", draft_seconds=0.030)


def test_a_reply_held_at_k0_is_its_own_baseline_once_long_enough() -> None:
    assert from_plain_cycles([plain()] * (OWN_CYCLES_TOKENS - 1)) is None
    own = from_plain_cycles([plain()] * OWN_CYCLES_TOKENS)
    assert own is not None and own.source == OWN_CYCLES_SOURCE and own.tokens == OWN_CYCLES_TOKENS
    assert abs(own.tokens_per_second - 40.0) < 1e-9


def test_a_reply_at_k0_is_compared_with_exactly_itself() -> None:
    """Every pass of a K = 0 reply counts, the first too: its speed-up reads 1.00x, not 0.98x."""
    cycles = [plain(seconds=0.020 + 0.001 * (i % 7)) for i in range(40)]
    own = from_plain_cycles(cycles)
    assert own is not None and own.tokens == 40
    stats = GenerationStats()
    for cycle in cycles:
        stats.add_cycle(cycle)
    assert abs(own.tokens_per_second - stats.decode_tps) < 1e-9


def test_only_plain_passes_after_plain_passes_count() -> None:
    """The pass after a drafting cycle is slower (the target's threads woke from the draft's
    turn: speculation's cost) and a draft pass that proposed nothing is not a plain pass: counted,
    either would make the baseline slower and the speed-up look better than it is."""
    slow_after_draft = plain(seconds=0.050)
    gave_up = plain(seconds=0.040, draft_seconds=0.015)  # the draft ran a pass and proposed nothing
    cycles = [*([plain()] * 20), drafted(), slow_after_draft, *([plain()] * 20), gave_up, slow_after_draft,
              *([plain()] * 10)]
    own = from_plain_cycles(cycles)
    assert own is not None and own.tokens == 20 + 20 + 10
    assert abs(own.tokens_per_second - 40.0) < 1e-9


def test_a_lookups_search_is_left_out_of_a_plain_pass() -> None:
    """A lookup that searched and found nothing: its microseconds are the drafters', not the pass's."""
    own = from_plain_cycles([plain(seconds=0.0251, draft_seconds=0.0001)] * 40)
    assert own is not None and abs(own.tokens_per_second - 40.0) < 1e-6


def test_the_panel_compares_a_reply_with_its_own_passes_once_it_has_them() -> None:
    from spectui.ui.stats_panel import PanelState

    state = PanelState(baseline=baseline())
    state.cycles = [plain(seconds=0.050)] * 10  # 20 tok/s, but too few yet
    assert state.compared_baseline() is state.baseline
    state.cycles = [plain(seconds=0.050)] * OWN_CYCLES_TOKENS
    own = state.compared_baseline()
    assert own is not None and own.source == OWN_CYCLES_SOURCE and abs(own.tokens_per_second - 20.0) < 1e-9
    assert dict(figures(GenerationStats(decode_tokens=40, decode_seconds=2.0), own))["speedup"] == "1.00x"
