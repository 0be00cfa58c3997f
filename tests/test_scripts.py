"""The measurement scripts still run: each on the test suite's tiny models, with few rounds.

They are not timed tests (their figures go to docs/BENCHMARKS.md); these only catch a script
that no longer runs against today's spectui, as bench_rpc.py once did after a rename."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from head_runs import LLAMA_SPECULATIVE

ROOT = Path(__file__).resolve().parent.parent


def run_script(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_bench_rpc_splits_the_tiny_target_over_two_workers(tmp_path: Path):
    out = tmp_path / "rpc.json"
    run_script("scripts/bench_rpc.py", "--tiny", "--delays", "0", "-k", "3", "--max-tokens", "16",
               "--netem", "off", "--json", str(out))
    result = json.loads(out.read_text())
    rows = {row["k"]: row for row in result["rows"]}
    assert set(rows) == {0, 3} and rows[3]["identical"] is True
    assert rows[0]["round_trips_per_token"] > rows[3]["round_trips_per_token"] > 0


@pytest.mark.parametrize("script", ["scripts/bench_mtp.py", "scripts/bench_snapshots.py"])
def test_the_cost_scripts_measure_the_generated_tiny_models(script: str):
    args = ["--rounds", "2", "--threads", "1", "--json"]
    if script.endswith("bench_snapshots.py"):
        args += ["--shape", "tiny", "--ks", "1,4"]
    lines = [line for line in run_script(script, *args).splitlines() if line.startswith("{")]
    result = json.loads(lines[0])
    assert result["arch"] == "qwen35"
    if script.endswith("bench_mtp.py"):
        assert result["head_pass_ms"] > 0 and result["target_step_ms"] > 0
    else:
        assert set(result["one_row_ms"]) == {"0", "16"}




@pytest.mark.parametrize("with_llama", [False, pytest.param(True, marks=pytest.mark.skipif(
    not LLAMA_SPECULATIVE.exists(), reason="llama.cpp's tools are not built (scripts/build_llama_cpp.sh)"))])
def test_bench_heads_runs_the_tiny_heads_and_matches_llama_cpp(tmp_path: Path, with_llama: bool):
    """With llama.cpp's own drivers built: from every context both drafted from, the same draft
    length gets the same verdict (the same hidden states go in, in line), and the same output."""
    out = tmp_path / "heads.json"
    # dspark and dspark-v4 (DeepSeek-V4 stages) run as --spec-type draft-dspark, dflash2 as draft-dflash
    kinds = ("eagle3", "dflash", "dspark", "dflash2", "dspark-v4")
    run_script("scripts/bench_heads.py", "--repeat", "1", "--max-tokens", "24", "--threads", "1",
               "--json", str(out), *(arg for kind in kinds for arg in ("--kind", kind)),
               *([] if with_llama else ["--no-llama"]))
    rows = json.loads(out.read_text())["rows"]
    cases = {row["case"] for row in rows}
    assert cases == {f"{kind}/{target}" for kind in kinds for target in ("llama", "qwen35")}
    spec = [row for row in rows if row["tool"] == "spectui"]
    assert all(row["identical"] and 0 < row["accepted"] < row["drafted"] for row in spec)
    theirs = [row for row in rows if row["tool"] == "llama.cpp"]
    assert len(theirs) == (10 if with_llama else 0)
    # llama.cpp's checkpoint path on the hybrid target once parted from the plain greedy output after
    # 37 tokens (docs/BENCHMARKS.md); the verdicts are compared while the contexts are the same
    assert all((row["identical"] or row["shared"] >= 16) and row["cycles_compared"] >= 10
               and row["cycles_agree"] == row["cycles_compared"] for row in theirs)


def test_bench_host_measures_the_old_and_the_new_path_on_the_same_tokens(tmp_path: Path):
    out = tmp_path / "host.json"
    run_script("scripts/bench_host.py", "--vocab", "6000", "-k", "2", "--temperatures", "0,0.8", "--rounds", "1",
               "--max-tokens", "8", "--threads", "1", "--dir", str(tmp_path), "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert [(r["temperature"], r["k"]) for r in rows] == [(0.0, 2), (0.8, 2)]
    for row in rows:
        assert row["same"] is True and row["acceptance"] == 1.0  # the draft is the target itself
        assert row["old_host_ms"] > 0 and row["new_host_ms"] > 0 and row["new_llama_ms"] > 0
    llama = tmp_path / "llama.json"
    run_script("scripts/bench_host.py", "--llama-sampling", "--vocab", "6000", "--rounds", "1", "--threads", "1",
               "--dir", str(tmp_path), "--json", str(llama))
    found = json.loads(llama.read_text())["llama_sampling"]
    assert {(r["rows"], r["op"]) for r in found} == {(1, "greedy"), (1, "top_k"), (9, "greedy"), (9, "top_k")}
    assert all(r["numpy_ms"] > 0 and r["llama_ms"] > 0 and r["same_tokens"] for r in found)


def test_build_weak_draft_keeps_the_first_layers_exactly(tmp_path: Path):
    """The truncated target is the model of its first layers: llama.cpp gives it the logits of
    tiny_gguf's draft (written from the same weights with only those layers), bit for bit (the
    same tensors, the same graph, the same kernels), and not the full target's."""
    import numpy as np
    import tiny_gguf

    from spectui.engine.model.llama_model import LlamaModel

    pair = tiny_gguf.write_pair(tmp_path / "pair", draft_layers=1)
    weak = tmp_path / "weak.gguf"
    out = run_script("scripts/build_weak_draft.py", str(pair.target), str(weak), "--layers", "1")
    assert "the first 1 of" in out

    def logits(path: Path) -> np.ndarray:
        with LlamaModel.load(path, n_ctx=128, n_threads=1) as model:
            return model.extend(model.tokenize("Once upon a time"), n_logits=1).copy()

    got = logits(weak)
    assert np.array_equal(got, logits(pair.draft))
    assert not np.allclose(got, logits(pair.target))
    again = run_script_fails("scripts/build_weak_draft.py", str(pair.target), str(weak), "--layers", "1")
    assert "exists" in again  # a file already there is never overwritten


def run_script_fails(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    return done.stderr


def test_bench_agent_runs_the_edit_and_a_whole_tool_loop_through_spectui_serve(tmp_path: Path):
    """spectui's side of scripts/bench_agent.py (llama-server is not needed): the tiny target gets
    a tool-call template in a copy, and its required call ends the loop with an answer."""
    out = tmp_path / "agent.json"
    run_script("scripts/bench_agent.py", "--tiny", "--no-llama", "--no-spectui-off", "--temperature", "0",
               "--threads", "1", "--work", str(tmp_path), "--out", str(out))
    result = json.loads(out.read_text())
    rows = {row["workload"]: row for row in result["rows"]}
    assert set(rows) == {"edit", "tool-call", "tool-answer"} and result["edit_route"] == "/v1/chat/completions"
    assert rows["tool-call"]["called"] is True and rows["tool-call"]["finish_reason"] == "tool_calls"
    [call] = rows["tool-call"]["tool_calls"]
    assert call["name"] in ("run_tests", "read_file") and json.loads(call["arguments"])["path"]
    assert rows["tool-answer"]["prompt_tokens"] > rows["tool-call"]["prompt_tokens"]  # the call and its result
    assert all(row["tokens"] > 0 and row["server_tps"] > 0 for row in rows.values())
    assert list(tmp_path.glob("target-*-qwen25-template.gguf"))
