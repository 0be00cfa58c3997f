"""The host's cost per speculative cycle, old code path against new, for docs/BENCHMARKS.md.

    python scripts/bench_host.py [--vocab 32000,152064,248320] [-k 1,4,8,16] [--temperatures 0,0.8]
                                 [--rounds 3] [--max-tokens 64] [--threads 2] [--clock wall|cpu]
                                 [--agreement full|partial] [--dir DIR] [--json FILE]

On a GPU one verify pass of a 7B target takes ~10-20 ms, so what the host does per cycle outside
llama.cpp's compute calls (reading K+1 rows of logits, sampling, acceptance, bookkeeping) must stay
a small share of it. This measures that time (`spectui.engine.llama.hostcost`: the same figures as
`spectui bench --json`'s `host_ms_per_cycle`) on generated pairs with real-size vocabularies and
one tiny layer, where llama.cpp's part is small and the host's shows:

  vocab   32000 (Llama 2 / Mistral), 152064 (Qwen2.5), 248320 (Qwen3.5 / Gemma 4-sized)
  K       1, 4, 8, 16 (fixed draft lengths, the draft model drafter)
  T       0 (greedy), and 0.8 with top-k 40, top-p 0.95, min-p 0.05

`--agreement full` (the default) makes the draft the target itself, so every proposal is
accepted and every cycle reads all K+1 rows and the bonus token: the most host work a cycle can
have. `partial` drafts with the first of two layers (acceptance well below 1).

Each round runs every (vocab, T, K) on the OLD code path and the NEW one, interleaved and in
alternating order, so a neighbour's load falls on both alike: the figure is the median per cycle
over the rounds. OLD is the code before an issue's change (kept callable here: `old_path()` lists
what it swaps back), `--old 39` (the default) the code before issue #39: `sampling.top_k_ids`
from a strided sample (the floor it gives, a comparison of the whole row with it, the ids that
passed) instead of the row's column maxima; `--old 27` the code before issue #27:
`sampling.reference_distribution` (a partition of the whole row) and a fresh
`np.ctypeslib.as_array` for every logits view. Both paths must emit the same tokens (same seed): the
`same` column says so, and a difference fails the run.

`--llama-sampling` measures another way in instead: argmax and top-k done by llama.cpp's
backend sampling (in the graph, on the device) against numpy on the rows, decode included.

`--clock cpu` reads the main thread's CPU time instead of wall time: on a busy machine a
preempted thread's wait would otherwise count as host work. Report wall figures from a quiet
machine; cpu figures from a busy one, saying so. The load average before and after is printed.
llama.cpp's OpenMP workers spin after each decode (ggml-cpu.c:3902-3914 asks for 200 ms), and the
host work right after a decode ran up to ~8x slower here while they did: run once more with
`OMP_WAIT_POLICY=PASSIVE` in the environment to see what that costs or saves on a given machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

PROMPT = "Once upon a time"
SAMPLED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
GOALS = {0.0: 1.5, 0.8: 3.0}
"""Issue #27's goals at the largest vocabulary and K = 8: host ms per cycle, by temperature."""


def write_pair(directory: Path, n_vocab: int, agreement: str) -> tuple[Path, Path]:
    """A target and draft with `n_vocab` tokens (the test suite's tokenizer plus plain extra
    tokens), one layer of width 64: the output matrix over the vocabulary is most of a pass."""
    import tiny_gguf

    base = tiny_gguf.vocabulary()
    n_layer = 1 if agreement == "full" else 2
    spec = replace(tiny_gguf.TinySpec(n_layer=n_layer),
                   tokens=tuple(base) + tiny_gguf.extra_tokens(n_vocab - len(base)))
    folder = directory / f"host-{n_vocab}-{agreement}"
    if not (folder / "draft.gguf").exists():
        tiny_gguf.write_pair(folder, spec=spec, draft_layers=1)
    return folder / "target.gguf", folder / "draft.gguf"


def strided_top_k_ids(logits, k: int):
    """`sampling.top_k_ids` before issue #39: the k-th largest of every 32nd logit as a floor,
    the ids at or above it (a comparison of the whole row into a reused boolean row, and the
    scan for the ones that passed), then a partition of those few."""
    import numpy as np

    from spectui.engine.step import sampling

    n_vocab = logits.shape[-1]
    sample = logits[::32]
    if n_vocab < sampling.FAST_FROM_VOCAB or sample.size < 2 * k:
        return np.argpartition(logits, -k)[-k:]
    floor = np.partition(sample, -k)[-k]
    mask = _STRIDED_MASK.get(n_vocab)
    if mask is None:
        mask = _STRIDED_MASK[n_vocab] = np.empty(n_vocab, dtype=bool)
    candidates = np.flatnonzero(np.greater_equal(logits, floor, out=mask))
    if candidates.size < k:
        return np.argpartition(logits, -k)[-k:]
    return candidates[np.argpartition(logits[candidates], -k)[-k:]]


_STRIDED_MASK: dict = {}
OLD = "39"
"""Which earlier code `old_path` swaps in (`--old`)."""


@contextlib.contextmanager
def old_path() -> Iterator[None]:
    """The host code as it was before issue #39 (or #27, `--old 27`), swapped in for the duration."""
    import numpy as np

    from spectui.engine.model import llama_model as model
    from spectui.engine.step import sampling

    if OLD == "39":
        saved_top_k = sampling.top_k_ids
        sampling.top_k_ids = strided_top_k_ids
        try:
            yield
        finally:
            sampling.top_k_ids = saved_top_k
        return
    saved = sampling.distribution, model.LlamaModel._logits_view
    sampling.distribution = sampling.reference_distribution
    model.LlamaModel._logits_view = lambda self, first, n: np.ctypeslib.as_array(first, shape=(n, self.n_vocab))
    try:
        yield
    finally:
        sampling.distribution, model.LlamaModel._logits_view = saved


def run_once(gen, prompt: list[int], k: int, temperature: float, max_tokens: int) -> tuple[dict, tuple]:
    from spectui.engine.events import Finished
    from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig

    sampling = SamplingConfig(**SAMPLED, seed=7) if temperature else SamplingConfig(temperature=0.0)
    gen.reset()
    events = gen.generate(prompt, GenerationConfig(max_tokens=max_tokens, sampling=sampling),
                          DraftControl(k, drafter="model"))
    final = next(e for e in events if isinstance(e, Finished))
    stats = final.stats
    figures = stats.host.per_cycle_ms(stats.target_passes)
    figures["acceptance"] = round(stats.acceptance_rate, 3)
    return figures, final.tokens


def measure(args: argparse.Namespace, directory: Path) -> list[dict]:
    from spectui.engine.generator import load_generator

    rows = []
    for n_vocab in args.vocab:
        target, draft = write_pair(directory, n_vocab, args.agreement)
        gen = load_generator(target, draft, n_ctx=1024, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers)
        try:
            prompt = gen.target.tokenize(PROMPT)
            cells = [(t, k) for t in args.temperatures for k in args.k]
            runs = {(path, t, k): [] for path in ("old", "new") for t, k in cells}
            outputs: dict[tuple, set] = {cell: set() for cell in cells}
            for t, k in cells:  # warm-up: first touch of weights and buffers, not timed
                run_once(gen, prompt, k, t, 8)
            for round_no in range(args.rounds):
                order = ("old", "new") if round_no % 2 == 0 else ("new", "old")
                for t, k in cells:
                    for path in order:
                        with old_path() if path == "old" else contextlib.nullcontext():
                            figures, tokens = run_once(gen, prompt, k, t, args.max_tokens)
                        runs[(path, t, k)].append(figures)
                        outputs[(t, k)].add(tokens)
                print(f"vocab {n_vocab}: round {round_no + 1}/{args.rounds} done", file=sys.stderr)
            rows.extend(summarize(n_vocab, cell, runs, outputs[cell]) for cell in cells)
        finally:
            gen.close()
    return rows


def summarize(n_vocab: int, cell: tuple[float, int], runs: dict, outputs: set) -> dict:
    t, k = cell

    def median(path: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[(path, t, k)]), 3)

    parts = ("host", "sampling", "draft", "rollback", "bookkeeping", "llama")
    row = {"vocab": n_vocab, "k": k, "temperature": t, "same": len(outputs) == 1,
           "acceptance": median("new", "acceptance")}
    row |= {f"old_{p}_ms": median("old", p) for p in parts}
    row |= {f"new_{p}_ms": median("new", p) for p in parts}
    row["speedup"] = round(row["old_host_ms"] / row["new_host_ms"], 2) if row["new_host_ms"] else 0.0
    return row


def table(rows: list[dict]) -> str:
    lines = [f"{'vocab':>7} {'T':>4} {'K':>3} {'old ms':>7} {'new ms':>7} {'x':>5}   new: "
             f"{'sampling':>8} {'draft':>6} {'rollbk':>6} {'books':>6}   {'llama ms':>8} {'acc':>5} same"]
    for r in rows:
        lines.append(f"{r['vocab']:>7} {r['temperature']:>4} {r['k']:>3} {r['old_host_ms']:>7.3f} "
                     f"{r['new_host_ms']:>7.3f} {r['speedup']:>5.2f}        {r['new_sampling_ms']:>8.3f} "
                     f"{r['new_draft_ms']:>6.3f} {r['new_rollback_ms']:>6.3f} {r['new_bookkeeping_ms']:>6.3f}"
                     f"   {r['new_llama_ms']:>8.1f} {r['acceptance']:>5.2f} {'yes' if r['same'] else 'NO'}")
    return "\n".join(lines)


def goal_lines(rows: list[dict]) -> list[str]:
    """Issue #27's goals, checked at the largest vocabulary measured, K = 8."""
    largest = max((r["vocab"] for r in rows), default=0)
    found = []
    for r in rows:
        if r["vocab"] == largest and r["k"] == 8 and r["temperature"] in GOALS:
            goal = GOALS[r["temperature"]]
            verdict = "met" if r["new_host_ms"] < goal else "NOT met"
            found.append(f"goal: vocab {largest}, K=8, T={r['temperature']}: {r['new_host_ms']:.2f} ms "
                         f"per cycle (< {goal} ms) {verdict}")
    return found


def llama_side(args: argparse.Namespace, directory: Path) -> list[dict]:
    """Argmax / top-k on llama.cpp's side (backend sampling: `llama_set_sampler`, then
    `llama_get_sampled_token_ith` / `_candidates_ith`) against numpy on the logits rows, timed
    whole (decode + reading the answer), interleaved: a draft's one-row pass and a pass of
    K+1 = 9 rows. On a GPU the backend variant spares copying rows x n_vocab floats to the host;
    on the CPU its top-k is std::partial_sort over the row (ggml-cpu/ops.cpp:8786-8823) and its
    argmax a single-thread scalar loop (ops.cpp:1570, vec.h:1618). Not used by spectui yet."""
    import llama_cpp

    from spectui.engine.llama.buffers import MAX_LOGIT_ROWS
    from spectui.engine.model.llama_model import LlamaModel

    defaults = llama_cpp.llama_context_default_params

    def with_outputs_per_seq() -> object:  # backend sampling serves 1 row per sequence by default
        params = defaults()
        params.n_outputs_max_per_seq = MAX_LOGIT_ROWS
        return params

    rows = []
    llama_cpp.llama_context_default_params = with_outputs_per_seq
    for n_vocab in args.vocab:
        target, _ = write_pair(directory, n_vocab, args.agreement)
        # three contexts on one file: plain logits (numpy), a greedy chain, a top-k chain attached
        # for good (a chain is initialised for the backend once: llama-sampler.cpp:739), so the
        # ways take turns round by round
        models = {way: LlamaModel.load(target, n_ctx=512, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers)
                  for way in ("numpy", "greedy", "top_k")}
        chains = [_chain("greedy"), _chain("top_k")]
        try:
            llama_cpp.llama_set_sampler(models["greedy"].context_handle, 0, chains[0])
            llama_cpp.llama_set_sampler(models["top_k"].context_handle, 0, chains[1])
            for model in models.values():
                model.sync(model.tokenize(PROMPT))
            for n_rows in (1, 9):
                rows.extend(_compare_sides(models, n_vocab, n_rows, args.rounds * 10))
        finally:
            for model in models.values():
                llama_cpp.llama_set_sampler(model.context_handle, 0, None)
                model.close()
            for chain in chains:
                llama_cpp.llama_sampler_free(chain)
    llama_cpp.llama_context_default_params = defaults
    return rows


def _chain(kind: str) -> object:
    import llama_cpp

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy() if kind == "greedy"
                                      else llama_cpp.llama_sampler_init_top_k(40))
    return chain


def _one_pass(model, tokens: list[int], kind: str, way: str) -> list:
    """Decode `tokens` with logits on every row, then each row's argmax / top-40 ids."""
    import llama_cpp
    import numpy as np

    from spectui.engine.step import sampling

    n = len(tokens)
    if way == "numpy":
        logits = model.extend(tokens, n_logits=n)
        return [int(np.argmax(row)) if kind == "greedy" else sampling.top_k_ids(row, 40) for row in logits]
    model._decode(tokens, n_logits=n)
    read = llama_cpp.llama_get_sampled_token_ith if kind == "greedy" else llama_cpp.llama_get_sampled_candidates_ith
    return [read(model.context_handle, i - n) for i in range(n)]


def _same(kind: str, answers: dict) -> bool:
    """Whether both ways found the same argmax per row / the same top-40 ids (as sets)."""
    import numpy as np

    mine, theirs = answers[(kind, "numpy")], answers[(kind, "llama")]
    if kind == "greedy":
        return [int(t) for t in mine] == [int(t) for t in theirs]
    count = len(mine[0])
    pairs = zip(mine, theirs, strict=True)
    return all(set(np.asarray(a).tolist()) == {int(b[j]) for j in range(count)} for a, b in pairs)


def _compare_sides(models: dict, n_vocab: int, n_rows: int, rounds: int) -> list[dict]:
    tokens = list(range(300, 300 + n_rows))
    bases = {way: len(model.cached) for way, model in models.items()}
    times: dict[tuple[str, str], list[float]] = {}
    answers: dict[tuple[str, str], list] = {}
    for round_no in range(rounds + 1):
        for kind in ("greedy", "top_k"):
            for way in ("numpy", "llama"):
                model = models["numpy" if way == "numpy" else kind]
                model.truncate(bases["numpy" if way == "numpy" else kind])
                start = time.perf_counter()
                answers[(kind, way)] = _one_pass(model, tokens, kind, way)
                if round_no:  # the first pass of each shape builds its graph
                    times.setdefault((kind, way), []).append(time.perf_counter() - start)
    found = []
    for kind in ("greedy", "top_k"):
        numpy_ms, llama_ms = (1e3 * statistics.median(times[(kind, way)]) for way in ("numpy", "llama"))
        found.append({"vocab": n_vocab, "rows": n_rows, "op": kind, "numpy_ms": round(numpy_ms, 3),
                      "llama_ms": round(llama_ms, 3), "same_tokens": _same(kind, answers)})
        print(f"{n_vocab:>7} rows {n_rows}: {kind:<6} decode + numpy {numpy_ms:7.2f} ms, "
              f"decode + llama.cpp's sampler {llama_ms:7.2f} ms")
    return found


def machine_facts(args: argparse.Namespace) -> dict:
    """Where the figures were taken: the host, and llama.cpp's build and devices (a GPU or not)."""
    from spectui.engine.llama.build_info import read_build_info
    from spectui.session.machine import cpu_count

    return {"platform": platform.platform(), "processor": platform.processor(), "cores": cpu_count(),
            "python": platform.python_version(), "clock": args.clock, "threads": args.threads,
            "n_gpu_layers": args.n_gpu_layers, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "llama_cpp": read_build_info().as_json()}


def csv_of(kind):
    return lambda text: [kind(part) for part in text.split(",") if part.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=csv_of(int), default=[32000, 152064, 248320])
    parser.add_argument("-k", type=csv_of(int), default=[1, 4, 8, 16])
    parser.add_argument("--temperatures", type=csv_of(float), default=[0.0, 0.8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-gpu-layers", type=int, default=None,
                        help="layers on the GPU (default: all of them where llama.cpp has a GPU backend, else 0)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--old", choices=("39", "27"), default="39",
                        help="the earlier code to compare with: before issue #39 (default) or #27")
    parser.add_argument("--agreement", choices=("full", "partial"), default="full")
    parser.add_argument("--dir", type=Path, default=None, help="keep the generated models here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the rows and the machine here")
    parser.add_argument("--llama-sampling", action="store_true",
                        help="instead: argmax/top-k by llama.cpp's backend sampling against numpy, per pass")
    args = parser.parse_args()
    global OLD
    OLD = args.old
    if args.llama_sampling:
        with tempfile.TemporaryDirectory(prefix="bench-host-") as scratch:
            found = llama_side(args, args.dir or Path(scratch))
        if args.json:
            args.json.write_text(json.dumps({"machine": machine_facts(args), "args": sys.argv[1:],
                                             "llama_sampling": found}, indent=1))
        return 0

    from spectui.engine.llama import hostcost

    if args.clock == "cpu":
        hostcost.use_clock(time.thread_time)
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        directory = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-host-")))
        directory.mkdir(parents=True, exist_ok=True)
        rows = measure(args, directory)
    load_after = os.getloadavg()
    print(f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after, on "
          f"{os.cpu_count()} cores; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    print(table(rows))
    for line in goal_lines(rows):
        print(line)
    if args.json:
        machine = machine_facts(args) | {"load_average_before": load_before[0], "load_average_after": load_after[0]}
        args.json.write_text(json.dumps({"machine": machine, "args": sys.argv[1:], "rows": rows}, indent=1))
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
