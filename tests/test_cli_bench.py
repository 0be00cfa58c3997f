"""`spectui bench` end to end on the tiny models, and the CLI's one-line errors."""

from __future__ import annotations

import json

import pytest
from cli_output import one_error_line

from spectui.cli import main

REQUIRED_KEYS = {"baseline_tps", "speculative_tps", "speedup", "acceptance_rate", "mean_accepted",
                 "identical", "k", "temperature"}


def bench(tiny_pair, *extra: str) -> list[str]:
    return ["bench", "--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft),
            "--max-tokens", "24", "--prompt", "The story of the wind", "--prompt", "in the", *extra]


def test_bench_json_sweep_prints_one_object_per_k(tiny_pair, capsys):
    assert main(bench(tiny_pair, "-k", "1,4,auto", "--json")) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["k"] for r in rows] == [1, 4, "auto"]
    for row in rows:
        assert row.keys() >= REQUIRED_KEYS
        assert row["identical"] is True
        assert row["temperature"] == 0.0
        assert row["baseline_tps"] > 0 and row["speculative_tps"] > 0
        assert row["speedup"] == pytest.approx(row["speculative_tps"] / row["baseline_tps"], rel=0.01, abs=0.001)
    assert 0 < rows[1]["acceptance_rate"] < 1 and rows[1]["mean_accepted"] > 1
    assert "baseline (K=0) and K=1,4,auto on 2 prompt(s)" in err  # progress goes to stderr


def test_bench_table_and_sampled_identity_is_not_claimed(tiny_pair, capsys):
    assert main(bench(tiny_pair, "-k", "3", "--temperature", "0.9", "--seed", "5", "--json")) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["identical"] is None and row["temperature"] == 0.9
    assert main(bench(tiny_pair, "-k", "2")) == 0
    table = capsys.readouterr().out.splitlines()
    assert "speedup" in table[0] and table[1].split()[0] == "2" and "yes" in table[1]


def test_bench_incompatible_pair_is_one_line_error(tiny_pair, incompatible_draft, capsys):
    args = ["bench", "--target", str(tiny_pair.target), "--draft", str(incompatible_draft)]
    assert main(args) == 1
    error = one_error_line(capsys.readouterr().err)
    assert "token 100: '_' vs '`'" in error


def test_bench_non_gguf_is_one_line_error(tiny_pair, tmp_path, capsys):
    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"<html>not found</html>")
    assert main(["bench", "--target", str(junk), "--draft", str(tiny_pair.draft)]) == 1
    assert "is not a GGUF file" in one_error_line(capsys.readouterr().err)


def test_bad_draft_length_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "-k", "99"])
    assert "draft length must be 0..16 or 'auto'" in capsys.readouterr().err


def test_bench_repeat_interleaves_rounds_prompt_by_prompt_and_reports_medians(tiny_pair, capsys, monkeypatch):
    import spectui.bench as bench_module

    replies: list[tuple[str, object]] = []
    real_run_one = bench_module.run_one

    def spy(gen, work, prompt, k):  # records the order; the real reply runs
        replies.append((prompt, k))
        return real_run_one(gen, work, prompt, k)

    monkeypatch.setattr(bench_module, "run_one", spy)
    assert main(bench(tiny_pair, "-k", "2,5", "--repeat", "2", "--json")) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["repeats"] for r in rows] == [2, 2]
    assert all(r["identical"] is True for r in rows)
    for row in rows:
        assert len(row["by_prompt"]) == len(row["by_prompt_spread"]) == 2
        spreads = zip(row["by_prompt"], row["by_prompt_spread"], strict=True)
        assert all(low <= median <= high for median, (low, high) in spreads)
    prompts = list(dict.fromkeys(p for p, _ in replies[1:]))
    assert len(prompts) == 2
    first, second = prompts
    # the warm-up, then each prompt's baseline and Ks back to back; every other round in reverse
    assert replies[1:] == [(first, 0), (first, 2), (first, 5), (second, 0), (second, 2), (second, 5),
                           (first, 5), (first, 2), (first, 0), (second, 5), (second, 2), (second, 0)]
    assert "(round 2/2)" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ["chat"]),
        (["--max-tokens", "200", "-k", "auto"], ["chat", "--max-tokens", "200", "-k", "auto"]),
        (["qwen2.5-7b"], ["chat", "qwen2.5-7b"]),
        (["bench", "--json"], ["bench", "--json"]),
        (["--version"], ["--version"]),
    ],
)
def test_a_bare_command_means_chat(argv, expected):
    from spectui.cli import build_parser, with_default_command

    assert with_default_command(argv) == expected
    if expected[0] == "chat":
        args = build_parser().parse_args(expected)
        assert args.command == "chat"


def _row(**values):
    from spectui.bench.report import BenchRow

    base = dict(k=4, temperature=0.0, max_tokens=24, prompts=2, baseline_tps=30.0, speculative_tps=45.0,
                speedup=1.5, acceptance_rate=0.8, mean_accepted=3.0, identical=True, prompt_tps=100.0,
                repeats=3, peak_rss_mb=100.0, target="t.gguf", draft="d.gguf", drafter="model",
                drafter_label="draft model d.gguf", by_drafter={}, round_trips_per_token=0.0,
                baseline_round_trips_per_token=0.0, network_wait_seconds=0.0, devices=[],
                speedup_min=1.45, speedup_max=1.55, others_cores=0.05, threads=2, target_arch="llama",
                rollback="kv", sampling="T=0 (greedy)")
    base.update(values)
    return BenchRow(**base)


def test_bench_warns_when_the_machine_was_busy_or_the_rounds_disagree():
    from spectui.bench.report import format_table, warnings

    assert warnings([_row()]) == []
    busy = warnings([_row(others_cores=1.1)])
    assert len(busy) == 1 and "1.1 cores" in busy[0]
    disagree = warnings([_row(speedup_min=0.9, speedup_max=2.4)])
    assert len(disagree) == 1 and "0.90x to 2.40x" in disagree[0]
    assert warnings([_row(repeats=1, speedup_min=0.9, speedup_max=2.4)]) == []  # one round: no spread
    table = format_table([_row()])
    assert "rounds" in table.splitlines()[0] and "1.45-1.55" in table.splitlines()[1]


def test_bench_json_has_the_spread_the_load_and_the_threads(tiny_pair, capsys):
    assert main(bench(tiny_pair, "-k", "3", "--repeat", "2", "--threads", "1", "--json")) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["speedup_min"] <= row["speedup"] <= row["speedup_max"]
    assert row["threads"] == 1 and "others_cores" in row
    assert (row["target_arch"], row["rollback"]) == ("llama", "kv")
    assert row["drafter"] == "model+suffix" and row["by_drafter"]["model"]["proposed"] > 0


def test_sampled_rounds_draw_new_texts_and_greedy_rounds_repeat_theirs():
    from spectui.bench import Workload, round_workload
    from spectui.chat.template import ChatFormat
    from spectui.engine.generation_config import GenerationConfig, SamplingConfig

    text = ChatFormat(None, mode="completion")
    sampled = Workload(["hi"], GenerationConfig(sampling=SamplingConfig(temperature=0.8, seed=7)), None, text)
    seeds = [round_workload(sampled, n).config.sampling.seed for n in (1, 2, 3)]
    assert seeds == [7, 8, 9]
    greedy = Workload(["hi"], GenerationConfig(sampling=SamplingConfig(seed=7)), None, text)
    assert round_workload(greedy, 3) is greedy


def test_each_prompt_gets_its_own_median_ratio(tiny_pair, capsys):
    """A loss on one prompt must show even when the others' gains hide it in the total."""
    from spectui.bench.report import RunTotals, prompt_ratios, prompt_spreads

    def run(*parts: tuple[int, float]) -> RunTotals:
        return RunTotals(sum(t for t, _ in parts), sum(s for _, s in parts), 0, 0, 1, (), 0, 0.0,
                         per_prompt=parts)

    bases = [run((10, 1.0), (10, 1.0)), run((10, 1.0), (10, 2.0)), run((10, 1.0), (10, 1.0))]
    specs = [run((30, 1.0), (9, 1.0)), run((20, 1.0), (10, 1.0)), run((40, 1.0), (8, 1.0))]
    assert prompt_ratios(bases, specs) == [3.0, 0.9]  # the second prompt: 0.9, 2.0, 0.8
    assert prompt_spreads(bases, specs) == [[2.0, 4.0], [0.8, 2.0]]  # and the range its rounds spread over
    assert main(bench(tiny_pair, "-k", "3", "--threads", "1", "--prompt", "Hello", "--prompt", "The wind",
                      "--json")) == 0
    row = json.loads(capsys.readouterr().out)
    assert len(row["by_prompt"]) == row["prompts"] == 4 and all(r > 0 for r in row["by_prompt"])
