"""`spectui bench` when something breaks under it: a worker killed, a model file cut, removed or
rewritten, at chosen points of a real run (load, baseline, speculative cycles, between replies).

Each case runs the real command in its own process (tests/run_with_fault.py) on the tiny models,
with a bounded wait: it must end by itself, in one line on stderr, with a non-zero exit, and print
no figures (with --json: one error object, never a row with `identical`). The cycle a fault lands
on is drawn at random (seeded: SPECTUI_FAULT_SEED repeats a run), since a fault may come at any
point. Which point it landed on is checked from the injector's own line (`fault fired: ...`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import tiny_gguf
from fault_points import SEED, Plan
from rpc_workers import start_worker

from spectui.engine import rpc

TESTS = Path(__file__).parent
WAIT = 240.0
"""Seconds a faulted command may take to end by itself (the tiny models run in a few)."""
MAX_TOKENS = 24


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def line(self) -> str:
        """The command's own last line (the injector's note and progress come before it)."""
        return self.err.strip().splitlines()[-1]

    @property
    def fired(self) -> str:
        return next((line.removeprefix("fault fired: ") for line in self.err.splitlines()
                     if line.startswith("fault fired: ")), "")


def bench_args(pair: tiny_gguf.TinyPair, *extra: str) -> list[str]:
    return ["bench", "--target", str(pair.target), "--draft", str(pair.draft), "-k", "3",
            "--max-tokens", str(MAX_TOKENS), "--threads", "1", "--prompt", "Once upon a time",
            "--prompt", "The wind", *extra]


def run(args: list[str], plan: Plan | None, home: Path) -> Outcome:
    env = {**os.environ, "SPECTUI_HOME": str(home), "SPECTUI_TEST_FAULT_SKIP": "1",
           **(plan.to_env() if plan else {})}
    done = subprocess.run([sys.executable, str(TESTS / "run_with_fault.py"), *args], capture_output=True,
                          text=True, timeout=WAIT, env=env)
    return Outcome(done.returncode, done.stdout, done.stderr)


def assert_fault_without_figures(outcome: Outcome, kind: str, json_out: bool) -> dict[str, object] | None:
    assert outcome.code == 1, outcome.err
    assert outcome.line.startswith("spectui: "), outcome.err
    assert "Traceback" not in outcome.err
    if not json_out:
        assert "speedup" not in outcome.out and "identical" not in outcome.out
        return None
    [error] = [json.loads(line) for line in outcome.out.splitlines()]  # one object, no rows
    assert error["fault"] == kind and error["exit_code"] == 1
    assert "identical" not in error and "speedup" not in error
    assert outcome.line == f"spectui: {error['error']}"
    return error


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, tmp_path: Path) -> tiny_gguf.TinyPair:
    """A copy of the tiny pair this test may cut."""
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    shutil.copy(tiny_pair.target, target)
    shutil.copy(tiny_pair.draft, draft)
    return tiny_gguf.TinyPair(target, draft)


# ----- a worker lost -------------------------------------------------------------------------------

needs_rpc = pytest.mark.skipif(not rpc.rpc_available(), reason="llama-cpp-python built without GGML_RPC")


@needs_rpc
@pytest.mark.parametrize(("phase", "json_out"), [("load", True), ("baseline", True), ("speculative", True),
                                                 ("between", True), ("speculative", False)])
def test_a_worker_killed_mid_bench_is_one_line_and_no_figures(pair, tmp_path, phase, json_out):
    rng = random.Random(f"{SEED}-{phase}")
    worker = start_worker()
    try:
        port = int(worker.endpoint.rsplit(":", 1)[1])
        at = {"load": rng.randint(3, 8), "between": rng.randint(1, 3)}.get(phase, rng.randint(1, MAX_TOKENS // 4))
        plan = Plan(phase, "kill-worker", at=at, worker_pid=worker.process.pid, worker_port=port)
        args = bench_args(pair, "--rpc", worker.endpoint, *(["--json"] if json_out else []))
        outcome = run(args, plan, tmp_path / "home")
    finally:
        worker.stop()
    assert outcome.fired, f"the fault never fired ({plan}): {outcome.err}"
    assert_fault_without_figures(outcome, "worker-lost", json_out)
    assert f"worker {worker.endpoint} stopped answering" in outcome.line, outcome.err
    assert outcome.line.endswith("start the worker again, then run the command again"), outcome.line


# ----- a model file cut, rewritten or removed while loaded ------------------------------------------


@pytest.mark.parametrize(("phase", "action", "which"), [
    ("speculative", "truncate", "target"),      # between two cycles: the check before each cycle
    ("baseline", "truncate", "draft"),
    ("between", "truncate", "target"),          # between replies: the check before a reply
    ("speculative", "truncate-in-decode", "target"),  # inside llama.cpp: the SIGBUS guard
    ("speculative", "rewrite", "target"),
])
def test_a_model_file_changed_mid_bench_is_one_line_naming_it(pair, tmp_path, phase, action, which):
    rng = random.Random(f"{SEED}-{phase}-{action}")
    path = pair.target if which == "target" else pair.draft
    at = rng.randint(1, 3) if phase == "between" else rng.randint(1, MAX_TOKENS // 4)
    plan = Plan(phase, action, at=at, file=str(path))
    outcome = run(bench_args(pair, "--json"), plan, tmp_path / "home")
    assert outcome.fired, f"the fault never fired ({plan}): {outcome.err}"
    error = assert_fault_without_figures(outcome, "model-file", json_out=True)
    assert error is not None
    how = "rewritten" if action == "rewrite" else "truncated"
    assert f"{path.name} was {how} on disk after it was loaded" in str(error["error"]), outcome.err
    assert str(error["error"]).endswith("put the file back (or pull the pair again), then run the command again")
    assert ("ended by the SIGBUS guard" in outcome.err) == (action == "truncate-in-decode")


def test_a_model_file_removed_mid_bench_keeps_the_loaded_copy_and_says_so(pair, tmp_path):
    plan = Plan("speculative", "remove", at=2, file=str(pair.draft))
    outcome = run(bench_args(pair, "--json"), plan, tmp_path / "home")
    assert outcome.code == 0, outcome.err
    [row] = [json.loads(line) for line in outcome.out.splitlines()]
    assert row["identical"] is True and row["speculative_tps"] > 0  # measured on the loaded copy
    assert any(line == "warning: draft.gguf was removed from disk while bench ran; the figures are from the copy "
               "loaded before, and the next run will not find it" for line in outcome.err.splitlines())


# ----- what bench cannot measure, refused before it runs ------------------------------------------


def test_bench_refuses_off_against_off(pair, tmp_path):
    outcome = run(bench_args(pair, "--drafter", "none", "--json"), None, tmp_path / "home")
    assert outcome.code == 2
    [error] = [json.loads(line) for line in outcome.out.splitlines()]
    assert error["fault"] == "cannot-measure"
    assert "--drafter none is speculation off itself" in outcome.line
    assert "loading" not in outcome.err  # refused before minutes of loading


def test_bench_refuses_a_drafter_the_models_cannot_run(pair, tmp_path):
    outcome = run(bench_args(pair, "--drafter", "mtp"), None, tmp_path / "home")
    assert outcome.code == 2
    assert outcome.line.startswith("spectui: cannot measure --drafter mtp: MTP heads is off")
    assert "these models run: model, ngram, suffix" in outcome.line
    assert "baseline (K=0)" not in outcome.err and "speedup" not in outcome.out


def test_bench_refuses_a_prompt_over_the_context_and_one_whose_reply_would_not_fit(pair, tmp_path):
    long_prompt = " ".join(["wind"] * 400)
    over = run([*bench_args(pair, "--ctx", "256"), "--prompt", long_prompt], None, tmp_path / "home")
    assert over.code == 2
    assert "prompt 3 is" in over.line and "more than the 256-token context: shorten it or raise --ctx" in over.line
    tight = run(bench_args(pair, "--ctx", "256", "--max-tokens", "250"), None, tmp_path / "home")
    assert tight.code == 2
    assert "and --max-tokens 250 need" in tight.line and "raise --ctx or lower --max-tokens" in tight.line
    assert "baseline (K=0)" not in over.err + tight.err


def test_a_prompt_and_reply_that_exactly_fill_the_context_are_measured(pair, spectui_home, monkeypatch, capsys):
    """The refusal's bound is the real one: prompt + --max-tokens = --ctx runs to the end."""
    from spectui.bench import refusals
    from spectui.cli import main

    seen: list[int] = []
    original = refusals.prompts_fit

    def spy(prompts, max_tokens, n_ctx):
        seen.extend(len(p) for p in prompts)
        return original(prompts, max_tokens, n_ctx)

    monkeypatch.setattr(refusals, "prompts_fit", spy)
    base = ["bench", "--target", str(pair.target), "--draft", str(pair.draft), "--threads", "1",
            "--prompt", "Once upon a time", "--ctx", "256", "--drafter", "model"]
    assert main([*base, "--max-tokens", "2"]) == 0
    fill = 256 - seen[0]
    capsys.readouterr()
    assert main([*base, "--max-tokens", str(fill), "-k", "auto", "--json"]) == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["identical"] is True
    assert main([*base, "--max-tokens", str(fill + 1)]) == 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_bench_stopped_mid_run_is_one_line_128_plus_the_signal_and_no_figures(pair, tmp_path, signum):
    at = random.Random(f"{SEED}-signal-{signum}").randint(1, MAX_TOKENS // 4)
    outcome = run(bench_args(pair, "--json"), Plan("speculative", "signal", at=at, signum=int(signum)),
                  tmp_path / "home")
    assert outcome.fired
    assert outcome.code == 128 + signum
    [error] = [json.loads(line) for line in outcome.out.splitlines()]
    assert error["fault"] == "interrupted" and "identical" not in error
    name = "Ctrl+C" if signum == signal.SIGINT else signal.Signals(signum).name
    assert outcome.line == f"spectui: interrupted ({name})"
