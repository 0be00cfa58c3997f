"""`spectui bench`'s results: one row per K (medians over rounds), as a table or JSON lines."""

from __future__ import annotations

import resource
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, TypedDict

from spectui.engine.events import GenerationStats, SourceTotals
from spectui.engine.generation_config import DraftLength, GenerationConfig
from spectui.engine.llama.hostcost import HostCost
from spectui.session.figures import ReplyFigures

if TYPE_CHECKING:
    from spectui.session.reply import ReplyDone


@dataclass(frozen=True)
class RunTotals:
    """Decode totals over all prompts for one K in one round."""

    tokens: int
    seconds: float
    drafted: int
    accepted: int
    passes: int
    outputs: tuple[tuple[int, ...], ...]
    prompt_tokens: int
    prompt_seconds: float
    by_source: dict[str, SourceTotals] = field(default_factory=dict)
    round_trips: int = 0
    network_wait_seconds: float = 0.0
    generated: int = 0
    host: HostCost = field(default_factory=HostCost)
    tree_cycles: int = 0
    tree_nodes: int = 0
    tree_branches: int = 0
    largest_tree: int = 0
    held_cycles: int = 0
    held_back: str = ""
    """Why K = auto held back, as the last reply that did said (empty: it never did)."""
    per_prompt: tuple[tuple[int, float], ...] = ()
    """Each prompt's decode tokens and seconds, in the order of the prompts."""

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def of(cls, figures: list[ReplyFigures], outputs: list[tuple[int, ...]],
           stats: Sequence[GenerationStats] = ()) -> RunTotals:
        """The replies' figures (from the reply core) added up, with what only the engine's totals
        hold (the host's cost, the token trees' shape)."""
        return cls(
            tokens=sum(f.decode_tokens for f in figures), seconds=sum(f.decode_seconds for f in figures),
            drafted=sum(f.drafted for f in figures), accepted=sum(f.accepted for f in figures),
            passes=sum(f.target_passes for f in figures), outputs=tuple(outputs),
            prompt_tokens=sum(f.prompt_decoded for f in figures),
            prompt_seconds=sum(f.prompt_seconds for f in figures),
            by_source=merge_sources({source: SourceTotals(d.proposed, d.accepted) for source, d in f.by_drafter.items()}
                                    for f in figures),
            round_trips=sum(f.round_trips for f in figures),
            network_wait_seconds=sum(f.network_wait_seconds for f in figures),
            generated=sum(f.tokens for f in figures),
            host=sum((s.host for s in stats), HostCost()),
            tree_cycles=sum(s.tree_cycles for s in stats), tree_nodes=sum(s.tree_nodes for s in stats),
            tree_branches=sum(s.tree_branches for s in stats),
            largest_tree=max((s.largest_tree for s in stats), default=0),
            held_cycles=sum(f.held_cycles for f in figures),
            held_back=next((f.held_back for f in reversed(figures) if f.held_back), ""),
            per_prompt=tuple((f.decode_tokens, f.decode_seconds) for f in figures),
        )

    @classmethod
    def of_replies(cls, replies: Sequence[ReplyDone]) -> RunTotals:
        """Finished replies, in the order of the prompts, added up."""
        return cls.of([r.figures for r in replies], [r.tokens for r in replies], [r.stats for r in replies])

    @property
    def round_trips_per_token(self) -> float:
        return self.round_trips / self.generated if self.generated else 0.0


def merge_sources(parts: Iterable[dict[str, SourceTotals]]) -> dict[str, SourceTotals]:
    """Per-drafter totals added up over replies or rounds."""
    merged: dict[str, SourceTotals] = {}
    for part in parts:
        for source, totals in part.items():
            mine = merged.setdefault(source, SourceTotals())
            mine.proposed += totals.proposed
            mine.accepted += totals.accepted
            mine.cycles += totals.cycles
    return merged


@dataclass(frozen=True)
class BenchRow:
    """One K's result; the keys of `--json`."""

    k: int | str
    temperature: float
    max_tokens: int
    prompts: int
    baseline_tps: float
    speculative_tps: float
    speedup: float
    acceptance_rate: float
    mean_accepted: float
    identical: bool | None
    """Outputs equal token for token (only meaningful at temperature 0; null otherwise)."""
    prompt_tps: float
    repeats: int
    peak_rss_mb: float
    target: str
    draft: str | None
    drafter: str
    """The drafter kind that proposed (`model`, `model+ngram`, …; `none` when none ran)."""
    drafter_label: str
    by_drafter: dict[str, dict[str, float]]
    """Per drafter that proposed: proposed and accepted tokens, acceptance (a combination lists
    each member)."""
    round_trips_per_token: float
    """With --rpc: network round trips to the workers per generated token, speculation on."""
    baseline_round_trips_per_token: float
    """The same with speculation off."""
    network_wait_seconds: float
    """With --rpc: seconds spent waiting on workers over the speculative runs (all rounds)."""
    devices: list[dict[str, object]]
    """With --rpc: each worker device (name, endpoint, layers, bytes placed there)."""
    speedup_min: float
    speedup_max: float
    """The spread of the per-round speedups (equal with --repeat 1)."""
    others_cores: float | None
    """Cores other programs used, on average, while the benchmark ran (None where unknown)."""
    threads: int
    target_arch: str
    """llama.cpp's architecture of the target (`qwen35` is a recurrent + attention hybrid)."""
    rollback: str
    """How the target undoes rejected drafts: `kv` (attention cache), `snapshots` (recurrent
    state snapshots, llama.cpp's n_rs_seq) or `none` (speculation off)."""
    sampling: str
    """The sampling both runs used (`T=0 (greedy)`, or `T=0.8 top-p 0.95 top-k 40 min-p 0.05`)."""
    host_ms_per_cycle: dict[str, float] = field(default_factory=dict)
    """Speculation on, per cycle (target pass), all rounds: `host` ms outside llama.cpp's compute
    calls, split into `sampling` (the verify walk), `draft` (the drafter outside llama.cpp),
    `rollback` and `bookkeeping`, and `llama` (inside them) beside it."""
    baseline_host_ms_per_cycle: dict[str, float] = field(default_factory=dict)
    """The same for the baseline (K = 0: one row read per cycle)."""
    system: dict[str, object] = field(default_factory=dict)
    """What `spectui doctor --json` says: llama.cpp's build and devices, this machine's GPUs."""
    tree_cycles: float = 0.0
    """The share of target passes that verified a token tree (0: chains only)."""
    tree_nodes: float = 0.0
    """Nodes of the average tree (its proposed tokens), over the cycles that had one."""
    tree_branches: float = 0.0
    """Branches (leaves) of the average tree."""
    largest_tree: int = 0
    """The most nodes one tree had."""
    held_back: float = 0.0
    """The share of target passes in which K = auto held a drafter at K = 0 (drafting would have
    made them slower)."""
    held_reason: str = ""
    """Why, as the last reply that held back said (`engine.events.HoldBack.describe`)."""
    by_prompt: list[float] = field(default_factory=list)
    """Per prompt, in the order given: the median over rounds of its speculative decode speed
    over its baseline's in the same round (the total's median can hide one prompt's loss)."""
    by_prompt_spread: list[list[float]] = field(default_factory=list)
    """Per prompt: the lowest and the highest of those rounds' ratios. A 64-token reply held at
    K = 0 throughout, run back to back with its baseline, read 0.88-1.08x on this VM: a prompt's
    median over a few rounds moves by a few percent on noise alone."""

    @property
    def shape(self) -> str:
        """`chain`, or e.g. `tree 30%: 7.2 nodes, 2.1 branches` (the table's shape column)."""
        if not self.tree_cycles:
            return "chain"
        return f"tree {self.tree_cycles:.0%}: {self.tree_nodes:.1f} nodes, {self.tree_branches:.1f} branches"


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB.

    Linux's VmHWM belongs to this process image; getrusage's ru_maxrss would also count a parent's
    peak from before exec (a benchmark script that spawned us), so it is only the fallback.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@dataclass(frozen=True)
class RunInfo:
    """What every row repeats: the files, the drafter, where the target runs."""

    target: Path
    draft: Path | None
    drafter: str
    drafter_label: str
    devices: list[dict[str, object]] = field(default_factory=list)
    others_cores: float | None = None
    threads: int = 0
    target_arch: str = ""
    rollback: str = ""
    system: dict[str, object] = field(default_factory=dict)


def make_row(k: DraftLength, config: GenerationConfig, bases: list[RunTotals], specs: list[RunTotals],
             info: RunInfo) -> BenchRow:
    """One K's row: medians over the rounds; each round's speedup against its own baseline."""
    greedy = config.sampling.greedy
    drafted, accepted = sum(s.drafted for s in specs), sum(s.accepted for s in specs)
    tokens, passes = sum(s.tokens for s in specs), sum(s.passes for s in specs)
    prompt_tokens, prompt_seconds = sum(s.prompt_tokens for s in specs), sum(s.prompt_seconds for s in specs)
    return BenchRow(
        k=k,
        temperature=config.sampling.temperature,
        max_tokens=config.max_tokens,
        prompts=len(bases[0].outputs),
        baseline_tps=round(median(b.tps for b in bases), 2),
        speculative_tps=round(median(s.tps for s in specs), 2),
        speedup=round(median(ratios(bases, specs) or [0.0]), 3),
        acceptance_rate=round(accepted / drafted, 4) if drafted else 0.0,
        mean_accepted=round(tokens / passes, 3) if passes else 0.0,
        identical=all(s.outputs == b.outputs for s, b in zip(specs, bases, strict=True)) if greedy else None,
        prompt_tps=round(prompt_tokens / prompt_seconds, 1) if prompt_seconds else 0.0,
        repeats=len(specs),
        peak_rss_mb=round(peak_rss_mb(), 1),
        target=str(info.target),
        draft=str(info.draft) if info.draft else None,
        drafter=info.drafter,
        drafter_label=info.drafter_label,
        by_drafter=_by_drafter(specs),
        round_trips_per_token=round(sum(s.round_trips for s in specs) / max(sum(s.generated for s in specs), 1), 3),
        baseline_round_trips_per_token=round(
            sum(b.round_trips for b in bases) / max(sum(b.generated for b in bases), 1), 3),
        network_wait_seconds=round(sum(s.network_wait_seconds for s in specs), 3),
        devices=info.devices,
        speedup_min=round(min(ratios(bases, specs), default=0.0), 3),
        speedup_max=round(max(ratios(bases, specs), default=0.0), 3),
        others_cores=None if info.others_cores is None else round(info.others_cores, 2),
        threads=info.threads,
        target_arch=info.target_arch,
        rollback=info.rollback,
        sampling=config.sampling.describe(),
        host_ms_per_cycle=host_per_cycle(specs),
        baseline_host_ms_per_cycle=host_per_cycle(bases),
        system=info.system,
        **_tree_figures(specs),
        held_back=round(sum(s.held_cycles for s in specs) / passes, 3) if passes else 0.0,
        held_reason=next((s.held_back for s in reversed(specs) if s.held_back), ""),
        by_prompt=prompt_ratios(bases, specs),
        by_prompt_spread=prompt_spreads(bases, specs),
    )


def host_per_cycle(runs: list[RunTotals]) -> dict[str, float]:
    """Host milliseconds per target pass over all `runs`, by part."""
    return sum((r.host for r in runs), HostCost()).per_cycle_ms(sum(r.passes for r in runs))



class _TreeFigures(TypedDict, total=False):
    tree_cycles: float
    tree_nodes: float
    tree_branches: float
    largest_tree: int


def _tree_figures(specs: list[RunTotals]) -> _TreeFigures:
    cycles, passes = sum(s.tree_cycles for s in specs), sum(s.passes for s in specs)
    if not cycles:
        return {}
    return {"tree_cycles": round(cycles / passes, 3), "tree_nodes": round(sum(s.tree_nodes for s in specs) / cycles, 2),
            "tree_branches": round(sum(s.tree_branches for s in specs) / cycles, 2),
            "largest_tree": max(s.largest_tree for s in specs)}


def ratios(bases: list[RunTotals], specs: list[RunTotals]) -> list[float]:
    """Each round's speculative speed over the baseline of the same round."""
    return [s.tps / b.tps for s, b in zip(specs, bases, strict=True) if b.tps]


def prompt_rounds(bases: list[RunTotals], specs: list[RunTotals]) -> list[list[float]]:
    """Per prompt, in the order given: its speculative speed over its baseline's, round by round
    (none when a baseline reply decoded nothing: the prompts would no longer line up)."""
    def tps(part: tuple[int, float]) -> float:
        return part[0] / part[1] if part[1] > 0 else 0.0

    per_round = [[tps(s) / tps(b) for s, b in zip(spec.per_prompt, base.per_prompt, strict=True) if tps(b)]
                 for spec, base in zip(specs, bases, strict=True)]
    if not per_round or any(len(r) != len(per_round[0]) for r in per_round):
        return []
    return [list(column) for column in zip(*per_round, strict=True)]


def prompt_ratios(bases: list[RunTotals], specs: list[RunTotals]) -> list[float]:
    """Per prompt: the median over rounds of its speculative speed over its baseline's."""
    return [round(median(column), 3) for column in prompt_rounds(bases, specs)]


def prompt_spreads(bases: list[RunTotals], specs: list[RunTotals]) -> list[list[float]]:
    """Per prompt: the lowest and the highest of its rounds' ratios."""
    return [[round(min(column), 3), round(max(column), 3)] for column in prompt_rounds(bases, specs)]


def _by_drafter(specs: list[RunTotals]) -> dict[str, dict[str, float]]:
    merged = merge_sources(s.by_source for s in specs)
    return {source: {"proposed": t.proposed, "accepted": t.accepted,
                     "acceptance_rate": round(t.acceptance_rate, 4)} for source, t in merged.items()}


def format_table(rows: list[BenchRow]) -> str:
    spread = any(r.repeats > 1 for r in rows)
    lines = [f"{'K':>5} {'baseline tok/s':>15} {'spec tok/s':>11} {'speedup':>8} "
             + (f"{'rounds':>12} " if spread else "") + f"{'accept':>7} {'mean acc.':>9} {'identical':>9}  shape"]
    for r in rows:
        identical = "-" if r.identical is None else ("yes" if r.identical else "NO")
        rounds = f"{r.speedup_min:>5.2f}-{r.speedup_max:<5.2f}x " if spread else ""
        lines.append(f"{r.k!s:>5} {r.baseline_tps:>15.1f} {r.speculative_tps:>11.1f} {r.speedup:>7.2f}x {rounds}"
                     f"{r.acceptance_rate:>7.1%} {r.mean_accepted:>9.2f} {identical:>9}  {r.shape}")
        if r.held_reason:
            lines.append(f"{'':>5} held at K=0 in {r.held_back:.0%} of passes: {r.held_reason}")
    return "\n".join(lines)


DISAGREE = 0.2
"""Rounds whose speedups spread wider than this fraction of their median disagree."""
BUSY_CORES = 0.3
"""Other programs using more than this many cores make every timing doubtful."""


def warnings(rows: list[BenchRow]) -> list[str]:
    """What makes these figures doubtful, one line each: a busy machine, rounds that disagree."""
    found = []
    others = rows[0].others_cores if rows else None
    if others is not None and others > BUSY_CORES:
        found.append(f"other programs used {others:.1f} cores while this ran: timings are unreliable; "
                     "rerun on a quiet machine")
    for r in rows:
        if r.repeats > 1 and r.speedup > 0 and (r.speedup_max - r.speedup_min) / r.speedup > DISAGREE:
            found.append(f"K={r.k}: the rounds disagree ({r.speedup_min:.2f}x to {r.speedup_max:.2f}x); "
                         "the median is shown; rerun with more --repeat on a quiet machine")
    return found
