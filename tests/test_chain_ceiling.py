"""scripts/chain_ceiling.py: the bound it reports is a bound, and the script runs on the tiny pair.

The script answers "could a better draft-length choice reach this speed?" (issue #35); a wrong
dynamic programme would answer it wrongly in either direction, so the pure parts are checked on
hand-made agreement sequences with costs chosen so the right answer is known."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tiny_gguf

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ceiling() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chain_ceiling", ROOT / "scripts" / "chain_ceiling.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def linear(per_row: float, base: float = 1.0) -> dict[int, float]:
    return {n: base + per_row * (n - 1) for n in range(1, 34)}


def test_runs_count_the_draft_s_right_tokens_in_a_row(ceiling: ModuleType):
    right = [True, True, False, True, True, True, False]
    assert ceiling.runs(right, cap=16) == [2, 1, 0, 3, 2, 1, 0, 0]
    assert ceiling.runs(right, cap=2) == [2, 1, 0, 2, 2, 1, 0, 0]


def test_with_free_rows_the_oracle_drafts_each_whole_run(ceiling: ModuleType):
    # Rows cost nothing extra and drafting is free: every cycle takes its whole run, so the time
    # is one pass per cycle. Runs 2, 3 then 1 cover 3 + 4 + 2 = 9 tokens in 3 passes.
    right = [True, True, False, True, True, True, False, True, False]
    run = ceiling.runs(right, cap=16)
    assert ceiling.oracle_seconds(run, linear(0.0), 0.0) == pytest.approx(3.0)
    assert ceiling.fixed_k_seconds(run, linear(0.0), 0.0, 1) > 3.0


def test_when_a_row_costs_a_pass_nothing_beats_plain_steps(ceiling: ModuleType):
    right = [True] * 12
    run = ceiling.runs(right, cap=16)
    plain = ceiling.oracle_seconds(ceiling.runs([False] * 12, 16), linear(1.0), 0.0)
    assert plain == pytest.approx(12.0)
    assert ceiling.oracle_seconds(run, linear(1.0), 0.0) == pytest.approx(12.0)
    assert ceiling.oracle_seconds(run, linear(1.0), 0.5) == pytest.approx(12.0)  # drafting only adds


def test_the_oracle_is_never_slower_than_any_fixed_k_nor_a_tree_than_its_chain(ceiling: ModuleType):
    rng = __import__("random").Random(3)
    for _ in range(20):
        right = [rng.random() < 0.7 for _ in range(60)]
        right2 = [r or rng.random() < 0.5 for r in right]
        run, verify = ceiling.runs(right, 16), linear(0.15)
        oracle = ceiling.oracle_seconds(run, verify, 0.05)
        assert all(oracle <= ceiling.fixed_k_seconds(run, verify, 0.05, k) + 1e-9 for k in range(0, 17))
        misses = [0]
        for r in right:
            misses.append(misses[-1] + (not r))
        tree = ceiling.oracle_seconds(ceiling.runs(right2, 16), verify, 0.05, misses)
        assert tree <= oracle + 1e-9
        beta = [0.7] * len(right)
        assert oracle <= ceiling.knowing_seconds(run, beta, verify, 0.05, 16) + 1e-9
        assert oracle <= ceiling.confident_seconds(run, [0.9] * 60, verify, 0.05, 8, 0.5) + 1e-9


def test_the_script_reports_bounds_on_the_tiny_pair(tmp_path: Path):
    pair = tiny_gguf.write_pair(tmp_path)
    out = tmp_path / "ceiling.json"
    done = subprocess.run([sys.executable, "scripts/chain_ceiling.py", str(pair.target), str(pair.draft),
                           "--tokens", "16", "--tries", "1", "--draws", "2", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    for key in ("T=0", "T=0.8"):
        row = report[key]
        assert 0.0 <= row["acceptance"] <= 1.0
        assert row["oracle_chain_x"] >= row["best_fixed_k_x"] > 0
    assert report["T=0"]["oracle_top2_tree_x"] >= report["T=0"]["oracle_chain_x"]
    assert report["T=0.8"]["oracle_chain_x"] >= report["T=0.8"]["knowing_x"]
