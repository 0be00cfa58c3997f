"""`spectui bench`: speculative vs. plain decoding on the same models, loaded once.

For every prompt the speculation-off baseline (K = 0, the same engine with no drafter work) and the
speculative loop each generate `--max-tokens` tokens; tokens/sec is total decoded tokens over total
decode time. `-k 1,2,4,8` sweeps draft lengths: one row (one JSON line) per K. Progress goes to
stderr so stdout stays clean for `--json`.

`--repeat N` runs the baseline and every K N times, interleaved prompt by prompt (each prompt's
baseline, K1, K2, ... back to back, the order reversed every other round), and reports medians,
with each speedup taken against the baseline of its own round: a shared or throttled CPU drifts by
tens of percent over seconds to minutes, and interleaving keeps that drift out of the ratio.
When sampling (T > 0), round i samples with seed + i - 1 (the same seed for the baseline and
every K of that round): the text sampled decides much of a K's acceptance, and one seed for every
round compared each K on one text only.

A fault is never a result. What bench cannot measure is refused before anything runs
(`bench.refusals`: speculation off against off, a drafter the models cannot run, a prompt that
does not fit the context). A run cut by a fault (a worker lost, a model file changed, Ctrl+C)
ends the command with one line and a non-zero exit, and `--json` prints an error object
(`spectui.faults.Fault.as_json`) instead of rows. The load and the runs happen on a worker
thread so that the main thread can answer signals (`spectui.signals.run_guarded`).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

from spectui import faults, safe_text, signals
from spectui.bench import refusals
from spectui.bench.report import BenchRow, RunInfo, RunTotals, format_table, make_row, warnings
from spectui.chat.template import ChatFormat, ChatMessage
from spectui.engine.generation_config import (
    AUTO,
    LLAMA_CPP_SAMPLING,
    DraftControl,
    DraftLength,
    GenerationConfig,
    SamplingConfig,
)
from spectui.engine.generator import Generator
from spectui.errors import LoadCancelled, SpectuiError
from spectui.session import machine
from spectui.session.options import ModelChoice
from spectui.session.reply import ReplyDone, ReplyRequest, final, prepare, run_reply

DEFAULT_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash map works, step by step, for a new programmer.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
)
DEFAULT_MAX_TOKENS = 128
WARM_UP_TOKENS = 8


@dataclass(frozen=True)
class Workload:
    """The prompts (each one user turn) and how each reply is generated."""

    prompts: list[str]
    config: GenerationConfig
    """Max tokens and sampling (the chat format adds its stop strings per reply)."""
    drafter: str | None
    """The drafter kind to use (None: the generator's default)."""
    chat_format: ChatFormat
    cancelled: Callable[[], bool] = lambda: False
    """True once the user stopped the benchmark (the run ends at its next cycle)."""

    def request(self, prompt: str, k: DraftLength) -> ReplyRequest:
        """One reply of this workload at draft length K, as the reply core takes it."""
        return ReplyRequest(messages=(ChatMessage("user", prompt),), sampling=self.config.sampling,
                            max_tokens=self.config.max_tokens, stop=self.config.stop,
                            draft=DraftControl(k, drafter=self.drafter))


def workload(gen: Generator, texts: Sequence[str], config: GenerationConfig, drafter: str | None) -> Workload:
    """Each prompt as one user turn in the model's chat template (or its continuation format)."""
    return Workload(list(texts), config, drafter, ChatFormat.from_model(gen.target))


def run_all(gen: Generator, work: Workload, k: DraftLength) -> RunTotals:
    """Every prompt once at K, each read from scratch (the same work for every K). A run a fault
    cut raises it: its figures are not results."""
    return RunTotals.of_replies([run_one(gen, work, prompt, k) for prompt in work.prompts])


def run_one(gen: Generator, work: Workload, prompt: str, k: DraftLength) -> ReplyDone:
    """One prompt at K, read from scratch; a reply a fault cut raises it."""
    gen.reset()
    done = final(run_reply(gen, work.chat_format, work.request(prompt, k), cancelled=work.cancelled))
    faults.raise_for(done)
    if done.reason == "cancelled":
        raise LoadCancelled("the benchmark was stopped")
    return done


def measure(gen: Generator, work: Workload, ks: list[DraftLength],
            repeat: int) -> dict[DraftLength, tuple[list[RunTotals], list[RunTotals]]]:
    """Interleaved rounds, returning K -> (baselines, speculative runs), one RunTotals per round.

    Each prompt's baseline and every K run back to back (the baseline first in odd rounds, last in
    even ones), so each prompt's ratio is taken over replies a second or two apart: a shared CPU's
    speed drifts over seconds as well as minutes, and with every prompt's baseline run before every
    K's, a 64-token reply's ratio spread 0.84-1.28x with speculation held at K = 0 throughout
    (docs/BENCHMARKS.md, "never slower": the sixth session's null runs)."""
    warm = replace(work, prompts=work.prompts[:1], config=replace(work.config, max_tokens=WARM_UP_TOKENS))
    run_all(gen, warm, AUTO)  # first touch of every model
    bases: list[RunTotals] = []
    specs: dict[DraftLength, list[RunTotals]] = {k: [] for k in ks}
    for round_no in range(1, repeat + 1):
        of = f" (round {round_no}/{repeat})" if repeat > 1 else ""
        this_round = round_workload(work, round_no)
        print(f"baseline (K=0) and K={','.join(map(str, ks))} on {len(work.prompts)} prompt(s){of} ...",
              file=sys.stderr)
        replies: dict[DraftLength, list[ReplyDone]] = {k: [] for k in (0, *ks)}
        for prompt in this_round.prompts:
            for k in round_order(ks, round_no):
                replies[k].append(run_one(gen, this_round, prompt, k))
        bases.append(RunTotals.of_replies(replies[0]))
        for k in ks:
            specs[k].append(RunTotals.of_replies(replies[k]))
    return {k: (bases, specs[k]) for k in ks}


def round_order(ks: Sequence[DraftLength], round_no: int) -> list[DraftLength]:
    """The order of one prompt's replies in round `round_no` (from 1): the baseline (K = 0), then
    every K, reversed every other round."""
    order: list[DraftLength] = [0, *ks]
    return order if round_no % 2 else order[::-1]


def round_workload(work: Workload, round_no: int) -> Workload:
    """The workload of round `round_no` (from 1): when sampling, seeded seed + round_no - 1."""
    sampling = work.config.sampling
    if sampling.greedy or round_no == 1:
        return work
    seed = (sampling.seed or 0) + round_no - 1
    return replace(work, config=replace(work.config, sampling=replace(sampling, seed=seed)))


def bench_command(args: argparse.Namespace) -> int:
    try:
        refusals.before_load(args)
        rows = signals.run_guarded(lambda stop: load_and_measure(args, stop),
                                   on_fatal=lambda: print_error(args, faults.bus_fault()))

    except SpectuiError as error:
        print_error(args, faults.of_error(error))
        raise
    for warning in warnings(rows):
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        for row in rows:
            print(json.dumps(asdict(row)), flush=True)
    else:
        print(format_table(rows))
    return 0


def print_error(args: argparse.Namespace, fault: faults.Fault) -> faults.Fault:
    """With --json, the error object on stdout where the rows would have been (the one line goes
    to stderr as for every command)."""
    if args.json:
        print(json.dumps(fault.as_json()), flush=True)
    return fault


def load_and_measure(args: argparse.Namespace, stop: threading.Event) -> list[BenchRow]:
    """Load the models, check what can be measured, measure (on the worker thread)."""
    from spectui.session.loaded import EngineSession
    from spectui.session.options import models_from_args, models_label
    from spectui.session.pair_load import LoadReport, LoadSpec

    choice = models_from_args(args)
    session = EngineSession()
    plan = session.plan(LoadSpec.of_command(args, choice))
    for warning in plan.warnings:
        print(f"warning: {safe_text.line(warning)}", file=sys.stderr)
    label = models_label(choice.target, choice.drafter.draft)
    threads = plan.threads
    print(f"loading {label} ({threads} thread{'s' if threads > 1 else ''}) ...", file=sys.stderr)
    pair = session.load(plan, LoadReport(progress=lambda _fraction: not stop.is_set()))
    gen = session.generator
    assert pair is not None and gen is not None  # never cancelled: a stopped load raises
    try:
        for note in pair.drafters.notes:
            print(f"note: {safe_text.line(note)}", file=sys.stderr)
        meter = machine.LoadMeter()
        rows = run_bench(gen, args, choice, threads, stop.is_set)
        others = meter.others()
        rows = [replace(row, others_cores=None if others is None else round(others, 2)) for row in rows]
        for name in gen.removed_files():
            print(f"warning: {name} was removed from disk while bench ran; the figures are from the copy "
                  "loaded before, and the next run will not find it", file=sys.stderr)
    finally:
        session.close()
    return rows


def run_bench(gen: Generator, args: argparse.Namespace, choice: ModelChoice, threads: int,
              cancelled: Callable[[], bool] = lambda: False) -> list[BenchRow]:
    refusals.after_load(gen, choice.drafter.kind)
    ks: list[DraftLength] = args.draft_length or [AUTO]
    config = GenerationConfig(
        max_tokens=args.max_tokens or DEFAULT_MAX_TOKENS,
        sampling=bench_sampling(args),
    )
    kind = None if choice.drafter.kind == "auto" else choice.drafter.kind
    work = replace(workload(gen, args.prompt or DEFAULT_PROMPTS, config, kind), cancelled=cancelled)
    prompts = [prepare(gen, work.chat_format, work.request(text, 0)).tokens for text in work.prompts]
    refusals.prompts_fit(prompts, config.max_tokens, gen.target.n_ctx)
    from spectui.session.doctor import this_machine

    info = RunInfo(choice.target, choice.drafter.draft, kind or gen.default_kind, gen.label(kind),
                   devices(gen), threads=threads, target_arch=gen.target.arch, rollback=gen.target.rollback,
                   system=this_machine().as_json())
    results = measure(gen, work, ks, args.repeat)
    return [make_row(k, config, bases, specs, info) for k, (bases, specs) in results.items()]


def bench_sampling(args: argparse.Namespace) -> SamplingConfig:
    """`--temperature` (0 by default: bench checks exactness) and the filters, each at llama.cpp's
    default unless given; a fixed seed so rounds and runs compare like with like."""
    chosen = {name: value for name in ("top_k", "top_p", "min_p") if (value := getattr(args, name)) is not None}
    return replace(LLAMA_CPP_SAMPLING, temperature=args.temperature, seed=0 if args.seed is None else args.seed,
                   **chosen)


def devices(gen: Generator) -> list[dict[str, object]]:
    """Where the target's layers went, when they went to RPC workers."""
    cluster = gen.target.rpc
    if cluster is None:
        return []
    layers = dict(cluster.layer_plan(gen.target.n_layer))
    placed = cluster.placed_bytes()
    return [{"name": d.name, "endpoint": str(d.endpoint), "layers": layers.get(d.name, 0),
             "bytes": placed.get(str(d.endpoint), 0)} for d in cluster.devices]
