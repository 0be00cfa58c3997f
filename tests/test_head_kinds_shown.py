"""The DSpark and DFlash2 kinds (and a DeepSeek-V4 DSpark head, which drafts as `dspark`) wherever
spectui names a drafter: the panel's drafter line and colour legend, a reply's figures per drafter,
bench's `by_drafter`, serve's per-drafter metrics, and the catalog (a pair whose drafter is
`dspark` or `dflash2`: its schema, its checks, `spectui list`'s DRAFTER column)."""

from __future__ import annotations

import argparse
from pathlib import Path

import head_runs
import pytest
import tiny_bigram
import tiny_dflash
import tiny_dspark_v4

from spectui.bench.report import RunInfo, RunTotals, make_row
from spectui.catalog import checks, record
from spectui.catalog.loader import load_catalog
from spectui.cli import main
from spectui.engine.drafters import DrafterSpec, colour_of, legend
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import load_generator
from spectui.errors import IncompatibleDraftError
from spectui.serve.metrics import Metrics
from spectui.session.figures import ReplyFigures
from spectui.session.options import models_from_args
from spectui.ui.stats_panel import describe_drafter

WRITERS = {"dspark": tiny_dflash.write_dspark_head, "dflash2": tiny_dflash.write_dflash2_head,
           "dspark-v4": tiny_dspark_v4.write_dspark_v4_head}
LABELS = {"dspark": "DSpark head", "dflash2": "DFlash2 head"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("new-kinds")
    target = tiny_bigram.llama_target(directory)
    for name, write in WRITERS.items():
        write(directory / f"{name}.gguf", target)
    return directory


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_the_panel_bench_and_serve_name_the_kind(folder, name):
    kind = name.partition("-")[0]
    head = folder / f"{name}.gguf"
    gen = load_generator(folder / "bigram-llama.gguf", DrafterSpec("auto", head), n_ctx=512,
                         n_threads=head_runs.THREADS)
    try:
        assert gen.default_kind == kind
        assert describe_drafter(DraftControl(AUTO), gen.describe()) == f"{LABELS[kind]} {head.name}"
        final = head_runs.run(gen, "Once upon a time", 3, max_tokens=24, temperature=0.0)
    finally:
        gen.close()
    stats = final.stats
    assert stats.drafted > 0
    figures = ReplyFigures.of(stats, "length", drafter=kind)
    assert set(figures.by_drafter) == {kind} and figures.by_drafter[kind].proposed == stats.drafted
    assert ReplyFigures.from_stored(figures.stored()).by_drafter == figures.by_drafter  # the chat store keeps it
    row = make_row(3, GenerationConfig(max_tokens=24, sampling=SamplingConfig(temperature=0.0)),
                   [RunTotals.of([figures], [tuple(final.tokens)])], [RunTotals.of([figures], [tuple(final.tokens)])],
                   RunInfo(folder / "bigram-llama.gguf", head, kind, f"{LABELS[kind]} {head.name}"))
    assert set(row.by_drafter) == {kind} and row.by_drafter[kind]["proposed"] == stats.drafted
    metrics = Metrics()
    metrics.reply(figures)
    assert f'spectui_drafted_tokens_total{{drafter="{kind}"}} {float(stats.drafted)}' in metrics.text().decode()


def test_the_legend_and_colours_count_the_new_heads():
    assert colour_of("dspark") == colour_of("dflash2") == colour_of("dflash") == "magenta"
    heads = dict((family.split(" (")[0], family) for _, family in legend())["heads"]
    assert heads == "heads (MTP, EAGLE-3, DFlash, DSpark, DFlash2)"


# ----- the catalog ---------------------------------------------------------------------------

PAIR = """
[pairs.{name}]
description = "a {name} pair"
size_gb = 1.0
drafter = "{kind}"
[pairs.{name}.target]
repo = "me/Target-GGUF"
files = ["target.gguf"]
[pairs.{name}.draft]
repo = "me/Head-GGUF"
files = ["{kind}.gguf"]
"""


def test_a_catalog_pair_may_draft_with_a_dspark_or_dflash2_head(spectui_home, capsys):
    user = spectui_home / "config" / "models.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(PAIR.format(name="spark", kind="dspark") + PAIR.format(name="selector", kind="dflash2"))
    catalog = load_catalog()
    assert catalog["spark"].entry.drafter == "dspark" and catalog["selector"].entry.drafter == "dflash2"
    assert main(["list"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line}
    assert rows["spark"][5] == "dspark" and rows["selector"][5] == "dflash2"  # DRAFTER (SIZE is "1.0 GB")


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_pulled_head_pair_is_checked_as_its_kind_and_listed(folder, spectui_home, capsys, name):
    kind = name.partition("-")[0]
    target, head = folder / "bigram-llama.gguf", folder / f"{name}.gguf"
    checks.check_drafter(target, head, kind)
    other = "dflash2" if kind == "dspark" else "dspark"
    with pytest.raises(IncompatibleDraftError, match=rf"^{name}.gguf is not a.* head .*set the pair's drafter"):
        checks.check_drafter(target, head, other)
    files = [record.PulledFile(path=str(p), size=p.stat().st_size) for p in (target, head)]
    record.add_pair("mine", record.PulledPair(target=files[:1], draft=files[1:], drafter=kind,
                                              description="tiny head", pulled_at=record.now()))
    args = argparse.Namespace(pair="mine", target=None, draft=None, drafter=None, draft_n_gpu_layers=None)
    assert models_from_args(args).drafter == DrafterSpec(kind, head)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"    head:   {head}" in out
    assert next(line for line in out.splitlines() if line.startswith("mine ")).split()[5] == kind
