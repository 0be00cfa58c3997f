"""`auto` among several heads on disk for one target: the one measured fastest on this machine
(`catalog.local.head_speeds`), measured by each load's calibration (`session.head_order`), with
llama-server's order (mtp > dspark > dflash2 > dflash > eagle3) only breaking ties.

No wall-clock time is asserted: the decisions rest on figures the tests write, or on a virtual clock
that only the scripted target's and drafters' passes move (as in tests/test_never_slower.py), so a
drafter whose drafts are always rejected measures slower than one whose drafts are accepted by
construction, however busy the machine is."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tiny_bigram
import tiny_dflash
import tiny_eagle3
from local_stores import only_folder
from virtual_clock import Clock, install

from spectui.catalog.local import auto_draft_for
from spectui.catalog.local.head_speeds import (
    TIE_MARGIN,
    Candidate,
    Measured,
    choose,
    file_id,
    measured_for,
    order,
    read_speeds,
    remember,
    speeds_path,
)
from spectui.chat.template import ChatFormat
from spectui.cli import main
from spectui.engine.doubles.scripted_drafter import ScriptedDrafter
from spectui.engine.doubles.scripted_target import ScriptedTarget, bigram_script
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.generator import Generator
from spectui.engine.step.drafter import Budget, Proposal
from spectui.session import baseline, head_order

N_VOCAB = 32
PASS_S = 0.010
"""A one-row target pass: 10 virtual ms."""
NO_TEMPLATE = ChatFormat(template=None, mode="completion")
"""The calibration replies to prompt tokens as they are: the scripted target needs no template."""


def figure(kind: str, speedup: float) -> Measured:
    return Measured(kind=kind, speedup=speedup, tokens=32)


# ----- the choice, from figures ---------------------------------------------------------------


def test_an_unmeasured_head_goes_first_in_llama_servers_order():
    a, b, c = Candidate(Path("/h/e.gguf"), "eagle3"), Candidate(Path("/h/f.gguf"), "dflash"), Candidate(None, "mtp")
    assert choose([a, b], {}).index == 1  # neither measured: dflash before eagle3
    assert choose([a, b, c], {}).index == 2  # the target's own MTP heads before any head on disk
    picked = choose([a, b, c], {"mtp": figure("mtp", 3.0)})
    assert picked.index == 1
    assert picked.reason == ("not yet measured on this machine: this load measures it (1 of 3 measured; "
                             "the fastest is kept)")
    assert choose([a], {}).reason == ""  # no choice to make


def test_the_fastest_measured_wins_and_near_ties_go_by_llama_servers_order(tmp_path):
    spark, flash, eagle = (tmp_path / "spark.gguf", tmp_path / "flash.gguf", tmp_path / "eagle.gguf")
    for path in (spark, flash, eagle):
        path.write_bytes(b"GGUF")
    keys = {path: file_id(path) for path in (spark, flash, eagle)}
    cands = [Candidate(eagle, "eagle3"), Candidate(flash, "dflash"), Candidate(spark, "dspark")]

    def figures(s: float, f: float, e: float) -> dict[str, Measured]:
        return {keys[spark]: figure("dspark", s), keys[flash]: figure("dflash", f), keys[eagle]: figure("eagle3", e)}

    assert choose(cands, figures(1.2, 1.5, 1.9)).index == 0  # eagle3: last in the order, fastest here
    assert order(cands, figures(1.2, 1.5, 1.9)) == [0, 1, 2]
    assert order(cands, figures(1.2, 1.5, 1.9) | {keys[flash]: figure("eagle3", 9.0)}) == [1, 0, 2]  # unmeasured first
    picked = choose(cands, figures(1.2, 1.9, 1.9))
    assert picked.index == 1  # a tie between dflash and eagle3: dflash first
    assert picked.reason == ("the fastest measured on this machine (1.90x the target alone, 2 within 5%: "
                             "llama-server's order decides)")
    assert choose(cands, figures(2.0 * (1 - TIE_MARGIN / 2), 2.0, 1.0)).index == 2  # within 5 %: dspark
    assert choose(cands, figures(2.0 * (1 - 2 * TIE_MARGIN), 2.0, 1.0)).index == 1  # beyond it: dflash
    # a figure recorded under another kind (the file was re-read as another kind) is not this head's
    stale = figures(3.0, 1.0, 1.0) | {keys[spark]: figure("dflash", 3.0)}
    assert choose(cands, stale).index == 2 and "not yet measured" in choose(cands, stale).reason


# ----- the record ---------------------------------------------------------------------------


def test_the_record_folds_measurements_and_forgets_a_rewritten_file(tmp_path, spectui_home):
    target, head = tmp_path / "t.gguf", tmp_path / "h.gguf"
    target.write_bytes(b"target")
    head.write_bytes(b"head")
    assert remember(target, head, "dspark", 2.0, 32, 0.8) is not None
    kept = remember(target, head, "dspark", 1.0, 32, 0.5)
    assert kept is not None and kept.speedup == pytest.approx(1.5) and kept.tokens == 64
    assert remember(target, None, "mtp", 1.4, 32) is not None
    figures = measured_for(target)
    assert set(figures) == {file_id(head), "mtp"} and figures["mtp"].kind == "mtp"
    on_disk = json.loads(speeds_path().read_text())  # one whole JSON, nothing left beside it
    assert on_disk["version"] == 1 and list(speeds_path().parent.iterdir()) == [speeds_path()]
    head.write_bytes(b"another head")  # rewritten: its old figure is not its own
    assert file_id(head) not in measured_for(target)
    os.utime(target, ns=(1, 1))
    assert measured_for(target) == {}  # a changed target: every figure is measured again
    speeds_path().write_text("{not json")
    assert read_speeds().targets == {}  # damaged: only the measurements are lost
    assert remember(tmp_path / "gone.gguf", head, "dspark", 2.0, 32) is None


# ----- measured by the calibration, on a virtual clock ----------------------------------------



@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield install(monkeypatch)


class CostedTarget(ScriptedTarget):
    """The scripted target in a file's place: each pass costs PASS_S plus 5 % per extra row."""

    def __init__(self, clock: Clock, path: Path) -> None:
        super().__init__(bigram_script(N_VOCAB, seed=3), N_VOCAB, n_ctx=8192)
        self.clock, self.path = clock, path

    def reset(self) -> None:
        self.cached.clear()

    def extend(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        self.clock.t += PASS_S * (1 + 0.05 * (len(tokens) - 1))
        return super().extend(tokens, n_logits)


class CostedHead(ScriptedDrafter):
    """A head of kind `kind` in file `path`: it proposes the target's greedy tokens (`right`) or
    always the wrong ones, each draft token costing 5 % of a target pass."""

    def __init__(self, clock: Clock, target: CostedTarget, kind: str, path: Path, right: bool) -> None:
        super().__init__(self._script, source=kind)
        self.clock, self.target, self.right = clock, target, right
        self.model = SimpleNamespace(path=path)

    def _script(self, context: Sequence[int], k: int) -> list[int]:
        tokens: list[int] = []
        for _ in range(k):
            best = int(np.argmax(self.target.logits([*context, *tokens])))
            tokens.append(best if self.right else (best + 1) % N_VOCAB)
        return tokens

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = super().propose(context, budget, cfg, rng)
        proposal.work = len(proposal.tokens)
        self.clock.t += 0.05 * PASS_S * proposal.work
        return proposal


def calibrate_with(clock: Clock, target: Path, kind: str, head: Path, right: bool) -> baseline.Calibration:
    """One load's calibration of `head` (as kind `kind`) for `target`."""
    scripted = CostedTarget(clock, target)
    generator = Generator(scripted, {kind: CostedHead(clock, scripted, kind, head, right)})  # type: ignore[arg-type,dict-item]
    assert generator.default_kind == kind
    return baseline.calibrate(generator, NO_TEMPLATE, [1, 2, 3, 4], lambda: False)


@pytest.fixture
def files(tmp_path: Path) -> SimpleNamespace:
    names = ("target", "spark", "flash")
    for name in names:
        (tmp_path / f"{name}.gguf").write_bytes(name.encode())
    return SimpleNamespace(**{name: tmp_path / f"{name}.gguf" for name in names})


@pytest.mark.parametrize("right", ["dspark", "dflash"])
def test_the_head_whose_drafts_are_accepted_measures_fastest_and_wins(clock, files, spectui_home, right):
    """Two heads for one target, one always accepted and one always rejected, each calibrated once
    (one load each): the accepted one is chosen, whichever llama-server's order puts first."""
    cands = [Candidate(files.flash, "dflash"), Candidate(files.spark, "dspark")]
    assert choose(cands, measured_for(files.target)).index == 1  # unmeasured: dspark first
    calibrate_with(clock, files.target, "dspark", files.spark, right == "dspark")
    assert choose(cands, measured_for(files.target)).index == 0  # then the one not yet measured
    calibrate_with(clock, files.target, "dflash", files.flash, right == "dflash")
    figures = measured_for(files.target)
    spark, flash = figures[file_id(files.spark) or ""], figures[file_id(files.flash) or ""]
    assert (spark.kind, flash.kind) == ("dspark", "dflash")
    accepted = spark if right == "dspark" else flash
    assert accepted.acceptance == 1.0 and (flash if right == "dspark" else spark).acceptance < 0.5
    assert accepted.speedup > 1.0
    picked = choose(cands, figures)
    assert cands[picked.index].kind == right and picked.reason.startswith("the fastest measured")


def test_equal_heads_go_by_llama_servers_order(clock, files, spectui_home):
    for kind, head in (("dflash", files.flash), ("dspark", files.spark)):
        calibrate_with(clock, files.target, kind, head, right=True)
    figures = measured_for(files.target)
    assert figures[file_id(files.spark) or ""].speedup == pytest.approx(figures[file_id(files.flash) or ""].speedup)
    cands = [Candidate(files.flash, "dflash"), Candidate(files.spark, "dspark")]
    assert choose(cands, figures).index == 1


def test_a_calibration_without_a_head_records_nothing(clock, files, spectui_home):
    scripted = CostedTarget(clock, files.target)
    model = ScriptedDrafter(lambda context, k: [0] * k, source="model")
    model.model = SimpleNamespace(path=files.spark)  # type: ignore[attr-defined]
    baseline.calibrate(Generator(scripted, {"model": model}), NO_TEMPLATE, [1, 2, 3], lambda: False)  # type: ignore[arg-type]
    assert not speeds_path().exists()
    assert head_order.speedup(4, 1.0, 10.0) is None  # too few tokens say nothing
    assert head_order.speedup(32, 1.0, None) is None


# ----- on generated heads, through `auto_draft_for` and a real load ---------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("three-heads")
    target = tiny_bigram.llama_target(directory)
    tiny_dflash.write_dspark_head(directory / "dspark-llama.gguf", target)
    tiny_dflash.write_dflash_head(directory / "dflash-llama.gguf", target)
    tiny_eagle3.write_eagle3_head(directory / "eagle3-llama.gguf", target)
    return directory


@pytest.fixture
def local(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spectui_home: Path) -> Path:
    """spectui looks at `folder` only (empty Ollama, LM Studio and HF stores)."""
    return only_folder(folder, tmp_path, monkeypatch, spectui_home)


def test_auto_measures_each_head_once_then_keeps_the_fastest(local, capsys):
    target = local / "bigram-llama.gguf"
    spark, flash, eagle = (local / f"{kind}-llama.gguf" for kind in ("dspark", "dflash", "eagle3"))
    head, message = auto_draft_for(target)
    assert head == spark
    assert message == (f"draft for {target}: {spark} (DSpark head, 49% of the target's size), picked automatically "
                       "from 3 compatible on disk, not yet measured on this machine: this load measures it "
                       "(0 of 3 measured; the fastest is kept); --draft REF picks another")
    remember(target, spark, "dspark", 1.3, 32)
    assert auto_draft_for(target)[0] == flash
    remember(target, flash, "dflash", 1.1, 32)
    assert auto_draft_for(target)[0] == eagle
    remember(target, eagle, "eagle3", 1.6, 32)
    head, message = auto_draft_for(target)
    assert head == eagle and "the fastest measured on this machine (1.60x the target alone)" in message
    remember(target, spark, "dspark", 1.9, 32)  # a later load of the DSpark head measured it faster
    assert auto_draft_for(target)[0] == spark
    # the listing, the app's local pairs and `auto` agree: heads in the order measured here
    assert main(["list", "--local"]) == 0
    out = capsys.readouterr().out.split("  draft: ", 1)[1]
    where = [out.index(str(path)) for path in (spark, eagle, flash)]
    assert where == sorted(where)
    # a kind asked for by name chooses among that kind's heads only
    assert auto_draft_for(target, kind="dflash")[0] == flash


def test_a_real_load_records_its_heads_figure(folder, spectui_home):
    """The calibration after loading a generated DSpark head writes its figure under the target's
    and the head's files (the speed itself is not asserted: wall clock on a busy machine)."""
    from spectui.engine.drafters import DrafterSpec
    from spectui.engine.generator import load_generator

    target, head = folder / "bigram-llama.gguf", folder / "dspark-llama.gguf"
    generator = load_generator(target, DrafterSpec("auto", head), n_ctx=512, n_threads=1)
    try:
        assert generator.default_kind == "dspark"
        calibration = baseline.calibrate(generator, ChatFormat.from_model(generator.target),
                                         generator.target.tokenize("Once upon a time"), lambda: False)
    finally:
        generator.close()
    figures = measured_for(target)
    assert list(figures) == [file_id(head)]
    measured = figures[file_id(head) or ""]
    assert measured.kind == "dspark" and measured.tokens == calibration.warm_tokens >= 8
    assert measured.acceptance == pytest.approx(calibration.warm_acceptance)


def test_the_targets_own_mtp_heads_compete_with_the_heads_on_disk(local, monkeypatch):
    """A target that carries an MTP head llama.cpp drafts with is one more candidate (measured
    under `mtp`, no file of its own): first in llama-server's order, kept only while fastest."""
    from spectui.catalog.local import pairing

    monkeypatch.setattr(pairing, "runs_own_heads", lambda _pairing: True)  # as a qwen35 -MTP GGUF would
    target = local / "bigram-llama.gguf"
    spark, flash, eagle = (local / f"{kind}-llama.gguf" for kind in ("dspark", "dflash", "eagle3"))
    head, message = auto_draft_for(target, mtp_supported=True)
    assert head is None and message.endswith("no separate draft needed: not yet measured on this machine: this "
                                             "load measures it (0 of 4 measured; the fastest is kept)")
    assert auto_draft_for(target, mtp_supported=False)[0] == spark  # MTP cannot run here: heads only
    for path, kind, speed in ((None, "mtp", 1.5), (spark, "dspark", 1.2), (flash, "dflash", 1.1),
                              (eagle, "eagle3", 1.0)):
        remember(target, path, kind, speed, 32)
    head, message = auto_draft_for(target, mtp_supported=True)
    assert head is None and "the fastest measured on this machine (1.50x the target alone)" in message
    remember(target, flash, "dflash", 2.5, 32)  # measured faster again: (1.1 * 32 + 2.5 * 32) / 64 = 1.8
    head, message = auto_draft_for(target, mtp_supported=True)
    assert head == flash and "(1.80x the target alone)" in message
