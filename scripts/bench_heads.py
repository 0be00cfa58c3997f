"""spectui's EAGLE-3 and DFlash-family drafters against llama.cpp's own, on the same files: for docs/BENCHMARKS.md.

    .venv/bin/python scripts/bench_heads.py [--k 3] [--max-tokens 64] [--repeat 3] [--threads 1] [--temperature 0]
                                            [--kind eagle3|dflash|dspark|dflash2 ...]
                                            [--llama-bin PATH | --no-llama] [--json OUT.json]
    .venv/bin/python scripts/bench_heads.py --target T.gguf --draft HEAD.gguf [--prompt TEXT ...]

Without --target: the test suite's tiny models (tests/tiny_bigram.py targets, an attention `llama`
and a hybrid `qwen35`; tests/tiny_eagle3.py and tests/tiny_dflash.py heads), generated into a
temporary folder, a case per kind and target (eagle3 and dflash by default; `--kind` picks, dspark,
dflash2 and dspark-v4 included: a DSpark head with DeepSeek-V4 stages, run as draft-dspark). With
--target/--draft: that pair (the head's header names the kind).

Per case and prompt, in interleaved rounds (`--repeat`), greedy (T = 0), with K fixed:

  spectui off    the target alone (K = 0): the baseline every speed-up divides by;
  spectui K      `load_generator(target, DrafterSpec(kind, head))` at K: rejection sampling's
                 greedy case, which accepts exactly what llama.cpp's exact-match rule accepts;
  llama.cpp K    llama-speculative-simple --spec-type draft-eagle3|draft-dflash|draft-dspark
                 --spec-draft-n-max K --spec-draft-p-min 0 --temp 0 (built from the same vendored
                 source by scripts/build_llama_cpp.sh; SPECTUI_LLAMA_BUILD: another build), its
                 decode speed, drafted/accepted tokens and draft calls (its `statistics` line at
                 -lv 4). A DFlash2 head runs as draft-dflash: llama.cpp's DFlash driver walks the
                 selector lattice whenever the head has one (speculative.cpp:1000, 1199).

`same output` compares the bytes each tool generated with spectui's target alone (llama.cpp prints
the prompt and then every token's piece to stdout; spectui's are its tokens' bytes), over the
tokens both produced (llama.cpp stops once it has *more* than -n); where llama.cpp's parts from it,
the table says after how many tokens (the fewest over the prompts): the two tools batch the
target's passes differently, so a near tie can fall the other way on a float's last bit. `positions
agree` counts the cycles llama.cpp drafted from a position spectui also drafted from, with the
same context (before any parting), that got the same verdict: (drafted, accepted). `cycles` are
target verify passes with a draft (llama.cpp: its draft calls). tok/s are decode tokens per second,
prompt excluded, medians over rounds. On the tiny models a target pass costs about as much as a head pass, so they show
that the protocol matches llama.cpp's (same output, same acceptance), not what a real head buys:
that needs published heads (models.toml: gpt-oss-20b-eagle3, qwen3.6-27b-dflash) and a GPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PROMPTS = ["Once upon a time", "The story of the wind", "then we"]
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
LOG_TRIES = 3
KINDS = ("eagle3", "dflash", "dspark", "dflash2", "dspark-v4")
"""The tiny cases' heads: dspark-v4 is a DSpark head with DeepSeek-V4 stages (tests/tiny_dspark_v4.py)."""
SPEC_TYPES = {"eagle3": "draft-eagle3", "dflash": "draft-dflash", "dspark": "draft-dspark", "dflash2": "draft-dflash"}
"""llama.cpp's --spec-type for each head kind (common/speculative.cpp:35-39)."""
PER_CYCLE = re.compile(r"accepted (\d+)/(\d+) draft tokens")
STATS = re.compile(r"statistics\s+draft-\w+: #calls\(b,g,a\) =\s+\d+\s+(\d+)\s+(\d+), #gen drafts =\s+\d+, "
                   r"#acc drafts =\s+\d+, #gen tokens =\s+(\d+), #acc tokens =\s+(\d+)")


@dataclass
class Case:
    name: str
    kind: str
    target: Path
    head: Path


@dataclass(frozen=True)
class Run:
    """One generation: what it wrote and what it cost."""

    text: bytes
    seconds: float
    tokens: int
    cycles: int
    drafted: int
    accepted: int
    pieces: tuple[bytes, ...] = ()
    """spectui: each generated token's bytes (to count how many tokens another output shares)."""
    per_cycle: tuple[tuple[int, int, int], ...] = ()
    """(position of `last`, drafted, accepted) of each cycle that drafted (llama.cpp: from a traced
    run). The tools split a reply into cycles differently (llama.cpp's first cycle drafts after the
    prompt's last token, spectui's after the target's first token), so cycles are matched by the
    position they draft from: the same context must get the same draft and the same verdict."""

    @property
    def speed(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Row:
    case: str
    tool: str
    k: int
    tokens: int = 0
    cycles: int = 0
    drafted: int = 0
    accepted: int = 0
    identical: bool | None = None
    shared: int | None = None
    """llama.cpp: the fewest leading tokens its output shared with spectui's target alone, over the
    prompts (greedy outputs can part at a near tie: the tools batch the target's passes differently,
    and a float's last bit differs)."""
    cycles_agree: int = 0
    """Cycles drafting from a position spectui also drafted from, with the same (drafted, accepted)."""
    cycles_compared: int = 0
    speeds: list[float] = field(default_factory=list)
    """Decode tok/s of every run (prompts x rounds)."""

    def compare_cycles(self, run: Run, reference: Run, end: int) -> None:
        """Against `reference` (spectui's run): every position both drafted K tokens from, while
        the two contexts are the same (the whole verify before position `end`)."""
        theirs = {pos: (drafted, accepted) for pos, drafted, accepted in run.per_cycle if drafted == self.k}
        for pos, drafted, accepted in reference.per_cycle:
            if pos in theirs and drafted == self.k and pos + drafted + 1 <= end:
                self.cycles_compared += 1
                self.cycles_agree += theirs[pos] == (drafted, accepted)

    def add_all(self, runs: list[Run]) -> None:
        """Sampled runs differ round by round: every run's counts, every speed."""
        for run in runs:
            self.add([run], None)

    def add(self, runs: list[Run], same: bool | None) -> None:
        """One prompt's runs: counts from the first (every round drafts the same), all speeds."""
        first = runs[0]
        self.tokens += first.tokens
        self.cycles += first.cycles
        self.drafted += first.drafted
        self.accepted += first.accepted
        self.speeds += [run.speed for run in runs]
        if same is not None:
            self.identical = same if self.identical is None else self.identical and same

    @property
    def tps(self) -> float:
        return statistics.median(self.speeds) if self.speeds else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


def tiny_cases(directory: Path, kinds: tuple[str, ...] = ("eagle3", "dflash")) -> list[Case]:
    import tiny_bigram
    import tiny_dflash
    import tiny_dspark_v4
    import tiny_eagle3

    writers = {"eagle3": tiny_eagle3.write_eagle3_head, "dflash": tiny_dflash.write_dflash_head,
               "dspark": tiny_dflash.write_dspark_head, "dflash2": tiny_dflash.write_dflash2_head,
               "dspark-v4": tiny_dspark_v4.write_dspark_v4_head}
    cases = []
    for name, target in (("llama", tiny_bigram.llama_target(directory)),
                         ("qwen35", tiny_bigram.hybrid_target(directory))):
        cases += [Case(f"{kind}/{name}", kind.removesuffix("-v4"), target.path,
                       writers[kind](directory / f"{kind}-{name}.gguf", target)) for kind in kinds]
    return cases


def spectui_run(gen, prompt: str, k: int, max_tokens: int, temperature: float = 0.0, seed: int = 0) -> Run:
    from spectui.engine.events import Finished, Progress
    from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig

    gen.reset()
    per_cycle, final = [], None
    tokens = gen.target.tokenize(prompt)
    position = len(tokens)  # the first cycle drafts after the target's first token
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig(temperature=temperature, seed=seed))
    for event in gen.generate(tokens, config, DraftControl(k)):
        if isinstance(event, Progress):
            if event.cycle.drafted:
                per_cycle.append((position, event.cycle.drafted, event.cycle.accepted))
            position += event.cycle.accepted + 1
        if isinstance(event, Finished):
            final = event
    assert final is not None
    stats = final.stats
    pieces = tuple(gen.target.token_bytes(t) for t in final.tokens)
    return Run(b"".join(pieces), stats.decode_seconds, stats.decode_tokens, len(per_cycle), stats.drafted,
               stats.accepted, pieces, tuple(per_cycle))


def llama_run(binary: Path, case: Case, prompt: str, k: int, max_tokens: int, threads: int,
              traced: bool = False, n_prompt: int = 0, temperature: float = 0.0, seed: int = 0) -> Run:
    """One llama-speculative-simple run; `traced` (debug log, untimed use only): each cycle's
    drafted and accepted tokens too."""
    command = [str(binary), "-m", str(case.target), "-md", str(case.head), "-p", prompt, "-n", str(max_tokens),
               "-c", "1024", "-t", str(threads), "--temp", str(temperature), "--seed", str(seed),
               "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05", "--spec-type", SPEC_TYPES[case.kind],
               "--spec-draft-n-max", str(k), "--spec-draft-p-min", "0", "-lv", "5" if traced else "4"]
    for _ in range(LOG_TRIES):  # llama.cpp's log thread sometimes drops its last lines at exit
        done = subprocess.run(command, capture_output=True, timeout=600)
        err = done.stderr.decode("utf-8", errors="replace")
        if done.returncode != 0 or traced or (DECODED.search(err) and STATS.search(err)):
            break
    out = done.stdout.lstrip(b"\n")
    text = out[len(prompt.encode()):].rstrip(b"\n") if out.startswith(prompt.encode()) else b""
    cycles, position = [], n_prompt - 1  # its first cycle drafts after the prompt's last token
    for accepted, drafted in ((int(a), int(d)) for a, d in PER_CYCLE.findall(err)):
        if drafted:
            cycles.append((position, drafted, accepted))
        position += accepted + 1
    if traced and done.returncode == 0:  # only the per-cycle lines are needed (and the text)
        return Run(text, 0.0, 0, len(cycles), 0, 0, (), tuple(cycles))
    decoded, stats = DECODED.search(err), STATS.search(err)
    if done.returncode != 0 or decoded is None or stats is None:
        raise SystemExit(f"llama-speculative-simple failed on {case.name} (exit {done.returncode}):\n{err[-2000:]}")
    return Run(text, float(decoded.group(2)), int(decoded.group(1)), int(stats.group(1)), int(stats.group(3)),
               int(stats.group(4)), (), tuple(cycles))


def shared_tokens(pieces: tuple[bytes, ...], other: bytes) -> int:
    """How many of these tokens (their bytes) `other` starts with."""
    n = at = 0
    for piece in pieces:
        if other[at : at + len(piece)] != piece:
            break
        n, at = n + 1, at + len(piece)
    return n


def same_output(a: bytes, b: bytes) -> bool:
    """Equal over the bytes both produced (the tools stop at different lengths past -n)."""
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def bench_case(case: Case, args: argparse.Namespace, binary: Path | None) -> list[Row]:
    from spectui.engine.drafters import DrafterSpec
    from spectui.engine.generator import load_generator

    tools = ["spectui off", "spectui", *(["llama.cpp"] if binary else [])]
    rows = {tool: Row(case.name, tool, 0 if tool == "spectui off" else args.k) for tool in tools}
    gen = load_generator(case.target, DrafterSpec(case.kind, case.head), n_ctx=1024, n_threads=args.threads)
    try:
        greedy = args.temperature <= 0
        for prompt in args.prompt or PROMPTS:
            runs: dict[str, list[Run]] = {tool: [] for tool in tools}
            for seed in range(args.repeat):  # interleaved: each round runs every tool once
                for tool in tools:
                    if tool == "llama.cpp":
                        assert binary is not None
                        runs[tool].append(llama_run(binary, case, prompt, args.k, args.max_tokens, args.threads,
                                                    temperature=args.temperature, seed=seed))
                    else:
                        runs[tool].append(spectui_run(gen, prompt, rows[tool].k, args.max_tokens,
                                                      args.temperature, seed))
            alone = runs["spectui off"][0].text
            for tool, row in rows.items():
                same = None if tool == "spectui off" or not greedy else same_output(runs[tool][0].text, alone)
                if not greedy:
                    row.add_all(runs[tool])
                elif tool == "llama.cpp":
                    assert binary is not None
                    n_prompt = len(gen.target.tokenize(prompt))
                    trace = llama_run(binary, case, prompt, args.k, args.max_tokens, args.threads, traced=True,
                                      n_prompt=n_prompt)
                    shared = shared_tokens(runs["spectui off"][0].pieces, runs[tool][0].text)
                    row.shared = shared if row.shared is None else min(row.shared, shared)
                    row.compare_cycles(trace, runs["spectui"][0], n_prompt + shared)
                    row.add(runs[tool], same)
                else:
                    row.add(runs[tool], same)
    finally:
        gen.close()
    return list(rows.values())


def table(rows: list[Row]) -> str:
    lines = [f"{'case':<14} {'tool':<12} {'K':>2} {'tok/s':>8} {'tokens':>7} {'cycles':>7} {'drafted':>8} "
             f"{'accepted':>9} {'accept':>7} {'same output':>12} {'positions agree':>16}"]
    for r in rows:
        same = "-" if r.identical is None else ("yes" if r.identical else f"first {r.shared}")
        agree = f"{r.cycles_agree}/{r.cycles_compared}" if r.cycles_compared else "-"
        lines.append(f"{r.case:<14} {r.tool:<12} {r.k:>2} {r.tps:>8.1f} {r.tokens:>7} {r.cycles:>7} {r.drafted:>8} "
                     f"{r.accepted:>9} {r.acceptance:>7.1%} {same:>12} {agree:>16}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=3, help="draft length for both tools (default 3)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds per prompt (medians)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="above 0: both tools sample (top-k 40, top-p 0.95, min-p 0.05, seed = round); "
                        "spectui by rejection sampling, llama.cpp by matching the head's top token: compare "
                        "acceptance (outputs differ, nothing is checked)")
    parser.add_argument("--kind", action="append", choices=KINDS,
                        help="the tiny cases of this head kind (repeatable; default: eagle3 and dflash)")
    parser.add_argument("--prompt", action="append", help="a prompt (repeatable; default: three short ones)")
    parser.add_argument("--target", type=Path, help="a real target GGUF (with --draft)")
    parser.add_argument("--draft", type=Path, help="its EAGLE-3 or DFlash head GGUF")
    parser.add_argument("--llama-bin", type=Path, help="llama-speculative-simple (default: the build of "
                        "scripts/build_llama_cpp.sh)")
    parser.add_argument("--no-llama", action="store_true", help="spectui only")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    from bench_lookup import default_llama_bin

    binary = None if args.no_llama else (args.llama_bin or default_llama_bin())
    if not args.no_llama and (binary is None or not binary.exists()):
        print(f"no {binary or 'llama-speculative-simple'}: run scripts/build_llama_cpp.sh (or pass --llama-bin / "
              "--no-llama)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        if args.target:
            from spectui.engine.files.heads import head_kind

            kind = head_kind(args.draft) if args.draft is not None else None
            if kind is None:
                parser.error("--target needs --draft naming an eagle3 or dflash GGUF")
            cases = [Case(args.target.name, kind, args.target, args.draft)]
        else:
            cases = tiny_cases(Path(tmp), tuple(args.kind or ("eagle3", "dflash")))
        rows = [row for case in cases for row in bench_case(case, args, binary)]
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {args.threads} thread(s), "
          f"K={args.k}, {args.max_tokens} tokens, {args.repeat} interleaved round(s), T={args.temperature:g}")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"k": args.k, "threads": args.threads, "rows": [
            {**asdict(r), "tps": round(r.tps, 1), "acceptance": round(r.acceptance, 4)} for r in rows]}, indent=2))
    agree = all((r.identical is not False or r.tool == "llama.cpp") and r.cycles_agree == r.cycles_compared
                for r in rows)
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
