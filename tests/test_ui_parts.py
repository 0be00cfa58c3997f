"""The UI's pure parts: memory estimates, panel figures, reply summaries, batching, options."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from spectui.cli import build_parser
from spectui.engine.drafters.spec import DrafterInfo
from spectui.engine.events import CycleStats, Finished, GenerationStats, Progress
from spectui.engine.generation_config import AUTO, DraftControl
from spectui.errors import SpectuiError
from spectui.session import memory
from spectui.session.baseline import Baseline, from_finished
from spectui.session.figures import ReplyFigures, comparison_verdict, describe_k, meta_line
from spectui.session.options import options_from_args
from spectui.session.reply import ReplyDone, ReplyPiece
from spectui.ui.messages import ReplyBatch, ReplyFinished
from spectui.ui.stats_panel import (
    HIDDEN,
    acceptance_series,
    figures,
    low_acceptance_advice,
)
from spectui.ui.worker_reports import ReplyBatcher, UpdatePace

GB = 10**9


def stats(generated: int = 40, seconds: float = 2.0, drafted: int = 30, accepted: int = 24,
          passes: int = 16) -> GenerationStats:
    return GenerationStats(generated_tokens=generated, decode_tokens=generated,
                           decode_seconds=seconds, drafted=drafted, accepted=accepted,
                           target_passes=passes)


# ----- memory ------------------------------------------------------------------------------

def test_footprint_reads_layers_and_kv_size_from_the_gguf_header(tiny_pair) -> None:
    target = memory.read_footprint(tiny_pair.target)
    draft = memory.read_footprint(tiny_pair.draft)
    assert (target.n_layer, draft.n_layer) == (4, 1)
    # 4 layers x 4 KV heads x (16 + 16) head dims x 2 bytes (f16)
    assert target.kv_bytes_per_token == 4 * 4 * 32 * 2
    assert target.kv_bytes(4096) == 4096 * 1024
    assert target.weights_bytes == tiny_pair.target.stat().st_size


def test_split_gguf_weights_sum_every_part(tmp_path: Path) -> None:
    for i, size in enumerate([300, 200], start=1):
        (tmp_path / f"big-{i:05d}-of-00002.gguf").write_bytes(b"x" * size)
    assert memory.weights_bytes(tmp_path / "big-00001-of-00002.gguf") == 500


def test_mem_available_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  16000000 kB\nMemFree:  1000 kB\nMemAvailable:   8000000 kB\n")
    assert memory.mem_available_bytes(meminfo) == 8_000_000 * 1024
    meminfo.write_text("MemTotal: 1 kB\n")
    assert memory.mem_available_bytes(meminfo) is None
    assert memory.mem_available_bytes(tmp_path / "absent") is None


TARGET = memory.Footprint("t.gguf", 8 * GB, 32, 128 * 1024)
SMALL_DRAFT = memory.Footprint("d.gguf", 1 * GB, 24, 32 * 1024)
BIG_DRAFT = memory.Footprint("d.gguf", 4 * GB, 24, 32 * 1024)


def test_plan_warns_when_ram_is_short_and_not_when_it_is_plenty() -> None:
    short = memory.plan(TARGET, SMALL_DRAFT, 4096, gpu=False, n_gpu_layers=None,
                        draft_n_gpu_layers=None, ram=6 * GB, vram=None)
    [warning] = short.warnings
    assert "6.0 GB of RAM is free" in warning and "--ctx" in warning
    plenty = memory.plan(TARGET, SMALL_DRAFT, 4096, gpu=False, n_gpu_layers=None,
                         draft_n_gpu_layers=None, ram=64 * GB, vram=None)
    assert plenty.warnings == []


def test_plan_warns_when_the_draft_is_over_a_third_of_the_target() -> None:
    result = memory.plan(TARGET, BIG_DRAFT, 4096, gpu=False, n_gpu_layers=None,
                         draft_n_gpu_layers=None, ram=64 * GB, vram=None)
    [warning] = result.warnings
    assert "50% of the target" in warning
    assert memory.draft_size_warning(TARGET, SMALL_DRAFT) is None


def test_plan_offloads_fewer_layers_when_vram_is_short() -> None:
    result = memory.plan(TARGET, SMALL_DRAFT, 4096, gpu=True, n_gpu_layers=None,
                         draft_n_gpu_layers=None, ram=64 * GB, vram=6 * GB)
    assert result.n_gpu_layers is not None and 0 < result.n_gpu_layers < 32
    assert f"offloading {result.n_gpu_layers} of 32 target layers" in result.warnings[0]
    roomy = memory.plan(TARGET, SMALL_DRAFT, 4096, gpu=True, n_gpu_layers=None,
                        draft_n_gpu_layers=None, ram=64 * GB, vram=80 * GB)
    assert roomy.n_gpu_layers is None and roomy.warnings == []


# ----- the panel ---------------------------------------------------------------------------

def test_k_is_described_as_the_user_reads_it() -> None:
    model = DrafterInfo(kinds=("model",), default="model", labels={"model": "draft model d.gguf"})
    assert describe_k(DraftControl(4), model) == "4"
    assert describe_k(DraftControl(AUTO), model, last_cycle_k=6) == "auto (now 6)"
    assert describe_k(DraftControl(3, enabled=False), model) == "off (K=3 when on)"
    assert describe_k(DraftControl(3), DrafterInfo()) == "off (no drafter)"
    assert describe_k(DraftControl(3, drafter="none"), model) == "off (drafter: none)"
    assert describe_k(DraftControl(0, enabled=False), model) == "0"  # the side-by-side re-run


def test_figures_show_acceptance_speed_and_speedup_against_the_baseline() -> None:
    rows = dict(figures(stats(), Baseline(10.0, 32, "calibration after load")))
    assert rows["acceptance"] == "80%"
    assert rows["mean accepted"] == "2.50 tok/pass"
    assert rows["this reply"] == "20.0 tok/s"
    assert rows["baseline (K=0)"] == "10.0 tok/s"
    assert rows["speedup"] == "2.00x"
    waiting = dict(figures(None, None))
    assert waiting["acceptance"] == "—" and waiting["baseline (K=0)"] == "measuring…"
    hidden = dict(figures(stats(), Baseline(10.0, 32, "x"), show_timings=False))
    assert hidden["this reply"] == hidden["speedup"] == HIDDEN
    assert hidden["acceptance"] == "80%"
    assert "token trees" not in rows  # chains only: no tree row


def test_the_panel_shows_the_trees_size_when_a_tree_was_verified() -> None:
    totals = GenerationStats()
    for drafted, accepted, branches in [(4, 3, 1), (7, 4, 3), (9, 2, 2), (4, 4, 1)]:
        totals.add_cycle(CycleStats(4, drafted, accepted, accepted + 1, 0.1, "model", branches=branches))
    rows = dict(figures(totals, Baseline(10.0, 32, "calibration after load")))
    assert rows["mean accepted"] == "4.25 tok/pass"
    assert rows["token trees"] == "50% of passes, 8.0 nodes in 2.5 branches"


def test_baseline_says_how_and_when_it_was_measured() -> None:
    baseline = Baseline(50.0, 32, "calibration after load")
    assert baseline.describe().startswith("baseline: 32 tokens, K=0, calibration after load ")
    assert baseline.describe(with_time=False) == "baseline: 32 tokens, K=0, calibration after load"
    done = Finished("length", stats(drafted=0, accepted=0), (), "")
    assert from_finished(done, "reply with speculation off").tokens_per_second == 20.0
    assert from_finished(Finished("eos", GenerationStats(), (), ""), "x") is None


def test_low_acceptance_advice_only_when_the_draft_mostly_missed() -> None:
    advice = low_acceptance_advice(stats(drafted=40, accepted=8), "8")
    assert advice is not None and "20%" in advice and "smaller K" in advice
    assert low_acceptance_advice(stats(drafted=40, accepted=30), "8") is None
    assert low_acceptance_advice(stats(drafted=6, accepted=0), "8") is None  # too little to tell


def test_token_trees_alternatives_are_not_read_as_a_draft_that_misses() -> None:
    """A tree of 7 candidates for one position can have 1 accepted at most: 14 % of its nodes
    even when the draft's first guess is always right. Only the chains judge the draft."""
    totals = GenerationStats()
    for _ in range(8):
        totals.add_cycle(CycleStats(k=7, drafted=7, accepted=1, emitted=2, seconds=0.01, branches=7))
    for _ in range(10):
        totals.add_cycle(CycleStats(k=3, drafted=3, accepted=2, emitted=3, seconds=0.01))
    assert totals.acceptance_rate < 0.4  # the share of accepted nodes, trees included
    assert totals.chain_acceptance_rate == 20 / 30
    assert low_acceptance_advice(totals, "auto") is None
    for _ in range(10):  # chains that do miss still get the advice, trees or not
        totals.add_cycle(CycleStats(k=3, drafted=3, accepted=0, emitted=1, seconds=0.01))
    advice = low_acceptance_advice(totals, "auto")
    assert advice is not None and "33%" in advice


def test_acceptance_series_skips_cycles_without_a_draft() -> None:
    cycles = [CycleStats(4, 4, 2, 3, 0.1), CycleStats(0, 0, 0, 1, 0.1), CycleStats(4, 4, 4, 5, 0.1)]
    assert acceptance_series(cycles) == [0.5, 1.0]


def test_reply_summary_line() -> None:
    done = ReplyFigures.of(stats(), "cancelled", k="4")
    line = meta_line(done)
    assert line == "40 tokens · 80% accepted · 2.50 tok/pass · K=4 · 20.0 tok/s · stopped"
    assert "tok/s" not in meta_line(done, show_timings=False)
    plain = ReplyFigures.of(stats(seconds=4.0, drafted=0, accepted=0, passes=40), "length", k="0")
    verdict = comparison_verdict(done, plain, same_text=True)
    assert verdict == ("speculative 20.0 tok/s vs speculation off 10.0 tok/s → 2.00x · "
                       "identical text")


def test_figures_survive_the_store_and_old_rows_read_as_they_were_shown() -> None:
    done = ReplyFigures.of(stats(), "eos", k="auto (now 4)", drafter="model", prompt_tokens=50, thinking_tokens=3)
    assert ReplyFigures.from_stored(done.stored()) == done
    old = {"reason": "eos", "tokens": 42, "drafted": 40, "acceptance": 0.75, "mean_accepted": 2.5, "tps": 88.0,
           "k": "4"}  # a row written before the figures were typed
    assert meta_line(ReplyFigures.from_stored(old)) == "42 tokens · 75% accepted · 2.50 tok/pass · K=4 · 88.0 tok/s"
    assert ReplyFigures.from_stored({}) is None and ReplyFigures.from_stored("damaged") is None


# ----- batching ----------------------------------------------------------------------------

def done(totals: GenerationStats, text: str = "") -> ReplyDone:
    return ReplyDone(ReplyFigures.of(totals, "eos"), text, "", (), totals)


def events() -> list[object]:
    totals = stats()
    return [
        ReplyPiece("Hel", "target"), Progress(CycleStats(4, 4, 3, 4, 0.01), totals),
        ReplyPiece("lo", "model", thinking=True), Progress(CycleStats(4, 4, 4, 5, 0.01), totals),
        done(totals, "Hello"),
    ]


def test_batcher_posts_every_event_at_interval_zero_and_one_batch_when_slow() -> None:
    posted: list[object] = []
    batcher = ReplyBatcher(posted.append, "reply", interval=0.0)
    for event in events():
        batcher.add(event)
    updates = [m for m in posted if isinstance(m, ReplyBatch)]
    assert len(updates) == 4 and isinstance(posted[-1], ReplyFinished)
    posted.clear()
    slow = ReplyBatcher(posted.append, "reply", interval=3600.0)
    for event in events():
        slow.add(event)
    [first, update, finished] = posted  # the first text at once, then the rest in one batch
    assert first.pieces == (ReplyPiece("Hel", "target"),) and first.cycles == ()
    assert update.pieces == (ReplyPiece("lo", "model", True),) and len(update.cycles) == 2
    assert isinstance(finished, ReplyFinished) and not finished.speculation_off


class PacedClock:
    """Wall and UI-thread CPU time for `UpdatePace`: each batch takes `cost` seconds of the UI's
    CPU, and the batches come `interval` apart."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def batch(self, pace: UpdatePace, cost: float) -> None:
        self.wall += pace.interval
        self.cpu += cost
        pace.observe()


def test_updates_slow_down_while_drawing_them_takes_the_models_core_and_speed_up_again() -> None:
    clock = PacedClock()
    pace = UpdatePace(fastest=0.1, slowest=0.5, share=0.1, clock=lambda: clock.wall, cpu=lambda: clock.cpu)
    for _ in range(20):
        clock.batch(pace, 0.002)  # 2 ms a batch: 2 % of a core at 10 a second
    assert pace.interval == 0.1
    for _ in range(20):
        clock.batch(pace, 0.030)  # 30 ms (a long chat): 30 % at 10 a second
    assert abs(pace.interval - 0.3) < 0.01  # where those 30 ms are 10 % of the time
    for _ in range(20):
        clock.batch(pace, 0.080)
    assert pace.interval == 0.5  # never slower than twice a second
    for _ in range(20):
        clock.batch(pace, 0.002)
    assert pace.interval == 0.1


def test_a_new_reply_does_not_count_the_idle_time_before_it() -> None:
    clock = PacedClock()
    pace = UpdatePace(fastest=0.1, slowest=0.5, share=0.1, clock=lambda: clock.wall, cpu=lambda: clock.cpu)
    for _ in range(10):
        clock.batch(pace, 0.030)
    slowed = pace.interval
    pace.start_reply()
    clock.wall += 60.0  # the user reads and types
    pace.observe()
    assert pace.interval == slowed  # 60 s of next to no CPU is not a cheap batch


def test_the_batcher_follows_its_pace() -> None:
    posted: list[object] = []
    pace = UpdatePace(fastest=3600.0)
    batcher = ReplyBatcher(posted.append, "reply", interval=0.0, pace=pace)
    for event in events()[:-1]:
        batcher.add(event)
    [first] = posted  # the reply's first text at once: its first token is never held for the pace
    assert first.pieces == (ReplyPiece("Hel", "target"),) and first.cycles == ()
    pace.interval = 0.0
    batcher.add(events()[1])
    assert len(posted) == 2 and posted[1].pieces == (ReplyPiece("lo", "model", True),) and len(posted[1].cycles) == 3


def test_batcher_marks_a_reply_run_entirely_at_k0_as_a_baseline() -> None:
    posted: list[object] = []
    batcher = ReplyBatcher(posted.append, "reply")
    totals = stats(drafted=0, accepted=0)
    for event in [Progress(CycleStats(0, 0, 0, 1, 0.01), totals), done(totals)]:
        batcher.add(event)
    assert posted[-1].speculation_off


# ----- options -----------------------------------------------------------------------------

def chat_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["chat", *argv])


def test_options_from_explicit_paths(tmp_path: Path) -> None:
    options = options_from_args(chat_args("--target", "t.gguf", "--draft", "d.gguf", "-k", "0",
                                          "--system", "Be brief.", "--max-tokens", "64"))
    assert (options.target.name, options.drafter.draft.name) == ("t.gguf", "d.gguf")
    control = options.draft_control()
    assert not control.enabled and control.effective_k() == 0 and control.k == AUTO
    assert options.system == "Be brief." and options.max_tokens == 64
    with pytest.raises(SpectuiError, match="--draft needs --target"):
        options_from_args(chat_args("--draft", "d.gguf"))


def test_options_from_a_pulled_catalog_pair(tiny_pair, spectui_home: Path) -> None:
    from spectui.catalog import pull_adhoc

    pull_adhoc("tiny", str(tiny_pair.target), str(tiny_pair.draft))
    options = options_from_args(chat_args("tiny"))
    assert options.pair_name == "tiny"
    assert options.target.samefile(tiny_pair.target) and options.drafter.draft.samefile(tiny_pair.draft)


def test_a_chat_recorded_with_another_pulled_pair_reopens_with_that_pairs_files(tiny_pair, spectui_home: Path) -> None:
    # `recorded_options` read `draft_model`, a field ResolvedPair never had (found by mypy)
    from spectui.catalog import pull_adhoc
    from spectui.session.options import recorded_options

    pull_adhoc("tiny", str(tiny_pair.target), str(tiny_pair.draft))
    current = options_from_args(chat_args("--target", "t.gguf", "--draft", "d.gguf"))
    options, why = recorded_options(current, "tiny", {"pair": "tiny", "drafter": "model"})
    assert why == "" and options is not None and options.pair_name == "tiny"
    assert options.target.samefile(tiny_pair.target) and options.drafter.draft.samefile(tiny_pair.draft)


def test_unknown_pair_names_the_pull_command(spectui_home: Path) -> None:
    with pytest.raises(SpectuiError, match="spectui pull"):
        options_from_args(chat_args("qwen2.5-7b"))


def test_pull_progress_is_posted_not_printed_and_a_quit_interrupts_it() -> None:
    from spectui.ui.messages import LoadProgress
    from spectui.ui.worker_reports import tqdm_posting

    posted: list[object] = []
    cancelled = {"now": False}
    bar_class = tqdm_posting(posted.append, lambda: cancelled["now"])
    bar = bar_class(total=200, desc="target.gguf")
    bar.update(100)
    bar.update(100)
    fractions = [m.fraction for m in posted if isinstance(m, LoadProgress)]
    assert fractions[-1] == 1.0 and all("target.gguf" in m.label for m in posted)
    cancelled["now"] = True
    with pytest.raises(InterruptedError):
        bar.update(1)
