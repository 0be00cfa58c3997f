"""`spectui serve` measured: its API's overhead, and spectui serve against llama-server.

    .venv/bin/python scripts/bench_serve.py                  # the chat demo pair, both parts (~15 min on 2 cores)
    .venv/bin/python scripts/bench_serve.py --pair demo-base # the Gemma 3 270M base pair of earlier benchmarks
    .venv/bin/python scripts/bench_serve.py --tiny           # the tiny test pair, few tokens: checks the script
    .venv/bin/python scripts/bench_serve.py --part overhead  # or --part llama
    .venv/bin/python scripts/bench_serve.py --target T.gguf --draft D.gguf --threads 2 --out results.json

Part `overhead` (issue #26: through the API ≤ 5 % fewer tok/s, time to first token + ≤ 20 ms):
the same replies (/v1/completions, T = 0, K = auto, 256 tokens) from `spectui serve` (a separate
process, streamed, timed by this client from sending the request to each chunk) and from the
reply core in this process (`session.reply.run_reply` on its own load of the same files with the
same drafters and warm-up, timed from the call to each event), in rounds whose order alternates.
Each side is loaded afresh for its round and closed after it, so the two never run at once and
each drafts only from its own replies. tok/s is (tokens - 1) over the time from the first text
to the last, as the caller sees it.

Part `llama` (issue #26: ≥ 1.2x llama-server's tok/s at T = 0 and ≥ 1.3x at T = 0.8): `spectui
serve` with its defaults (drafter auto, K = auto) and llama-server (built from the vendored
llama.cpp, scripts/build_llama_cpp.sh) on the same files with several speculative settings
(`--model-draft`, `--spec-type` draft-simple alone and behind ngram-simple / ngram-mod, draft
lengths 3/5/8, p-min 0 and 0.75), all loaded afresh for each round and temperature and asked in
turn, prompt by prompt, through the same client code: /v1/completions, streamed, 256 tokens, with
usage. At T = 0.8 both sample with top-k 40, top-p 0.95, min-p 0.05 and the same seed per round
(their generators differ, so their texts do too: compare rates, over rounds and prompts).
spectui is compared with llama-server's best setting at each temperature. Each server's own
`timings.predicted_per_second` is kept beside the client's figure.

The prompts are scripts/bench_lookup.py's workloads, each as one user turn rendered with the
target's own chat template by spectui (`ChatFormat.render`; a base model without one gets the text
to continue), and both servers get that same text on /v1/completions: the same tokens, whatever
their chat routes would make of the template. Run it on a quiet machine; compare figures only
within one run. Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bench_lookup import MODULE, default_llama_bin, tiny_pair  # noqa: E402  (the code workload's module)

PROMPTS = {
    "code": "Rewrite this Python module with type hints, keeping every line of logic.\n\n```python\n"
            f"{MODULE}```\n\nThe same module with type hints:\n\n```python\n",
    "plan": "A training plan for a beginner runner, one line per day, for four weeks.\n\nWeek 1\nMonday:",
    "story": "The old lighthouse stood at the end of the harbour wall. Every evening the keeper climbed "
             "its hundred steps, and every evening",
}
SAMPLED = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
LLAMA_CONFIGS = {
    "none": [],
    "draft-simple n3": ["--spec-type", "draft-simple", "--spec-draft-n-max", "3"],
    "draft-simple n5 p0.75": ["--spec-type", "draft-simple", "--spec-draft-n-max", "5", "--spec-draft-p-min", "0.75"],
    "draft-simple n8 p0.75": ["--spec-type", "draft-simple", "--spec-draft-n-max", "8", "--spec-draft-p-min", "0.75"],
    "ngram-simple,draft-simple n5 p0.75": ["--spec-type", "ngram-simple,draft-simple", "--spec-draft-n-max", "5",
                                           "--spec-draft-p-min", "0.75"],
    "ngram-mod,draft-simple n5 p0.75": ["--spec-type", "ngram-mod,draft-simple", "--spec-draft-n-max", "5",
                                        "--spec-draft-p-min", "0.75"],
}
"""llama-server's speculative settings tried (REFERENCE.md: p-min 0.75 restored acceptance where 0
lost it); every one but `none` loads the draft with --model-draft."""
GOALS = {"overhead_tps": 0.95, "overhead_ttft_ms": 20.0, "llama_t0": 1.2, "llama_t08": 1.3}


@dataclass
class Reply:
    """One reply as its caller saw it."""

    tokens: int
    ttft: float
    """Seconds from the call (or the request) to the first text."""
    decode_seconds: float
    """From the first text to the last."""
    server_tps: float | None = None
    """The server's own `timings.predicted_per_second`, where it gave one."""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def tps(self) -> float:
        return (self.tokens - 1) / self.decode_seconds if self.decode_seconds > 0 and self.tokens > 1 else 0.0


# ----- asking a server ----------------------------------------------------------------------------


def ask(url: str, prompt: str, max_tokens: int, sampling: dict[str, object], **extra: object) -> Reply:
    """One streamed /v1/completions request, timed on this side."""
    return stream(url, "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, **sampling, **extra})


def stream(url: str, route: str, body: dict[str, object]) -> Reply:
    """One streamed request to `route` (/v1/completions or /v1/chat/completions), timed on this
    side from sending it to each chunk that carries output (text, a chat delta's content or
    reasoning, or a tool call's delta). `extra` keeps the text, the tool calls put together from
    their deltas, the finish reason, the prompt's tokens and the server's draft counts."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    # made before the clock starts: a new httpx.Client costs ~20 ms (its TLS context), which is
    # not the server's; its connection (a localhost handshake) is made on the clock, as for any
    # client, and is never a kept-alive one the server may have closed meanwhile
    http = httpx.Client(timeout=600)
    first = last = None
    usage: dict[str, object] = {}
    timings: dict[str, object] = {}
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish = None
    start = time.perf_counter()
    with http, http.stream("POST", f"{url}{route}", json=body) as response:
        if response.is_error:
            response.read()
            raise RuntimeError(f"{url}{route} answered {response.status_code}: {response.text[:300]}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choice = (chunk.get("choices") or [{}])[0]
            delta = choice.get("delta") or {}
            piece = choice.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
            if piece or delta.get("tool_calls"):
                now = time.perf_counter()
                first = first or now
                last = now
            text.append(piece)
            for call in delta.get("tool_calls") or []:
                into = calls.setdefault(int(call.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                function = call.get("function") or {}
                into["id"] = call.get("id") or into["id"]
                into["name"] += function.get("name") or ""
                into["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
            timings = chunk.get("timings") or timings
    if first is None or last is None:
        raise RuntimeError(f"{url} sent no text")
    tokens = int(usage.get("completion_tokens", 0))
    return Reply(tokens, first - start, last - first, timings.get("predicted_per_second"),
                 {"draft_n": timings.get("draft_n"), "draft_n_accepted": timings.get("draft_n_accepted"),
                  "text": "".join(text), "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish,
                  "prompt_tokens": usage.get("prompt_tokens"), "seconds": last - start})


def wait_ready(url: str, process: subprocess.Popen, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server at {url} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server at {url} did not become ready")


@contextmanager
def running(command: list[str], url: str, log: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """The server `command` started (with `env` added to this process's environment), until ready;
    stopped with Ctrl+C on leaving."""
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **env} if env else None)
        try:
            wait_ready(url, process)
            yield url
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


GIVEN_PORTS: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, and not one handed out before (the system may offer a port
    again once its probe socket is closed, before the server given it has bound it)."""
    import socket

    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in GIVEN_PORTS:
            GIVEN_PORTS.add(port)
            return port


def spectui_server(setup: Setup, flags: Sequence[str] = ()) -> tuple[list[str], str]:
    """`spectui serve` on the pair with `flags` added (`--drafter none`: no draft loaded)."""
    port = free_port()
    draft = [] if "none" in flags else ["--draft", str(setup.draft)]
    command = [sys.executable, "-m", "spectui", "serve", "--target", str(setup.target), *draft,
               "--port", str(port), "--threads", str(setup.threads), "--ctx", str(setup.ctx), *flags]
    return command, f"http://127.0.0.1:{port}"


def llama_server(setup: Setup, flags: list[str]) -> tuple[list[str], str]:
    port = free_port()
    command = [str(setup.llama_server), "-m", str(setup.target), "--port", str(port), "-t", str(setup.threads),
               "-tb", str(setup.threads), "-c", str(setup.ctx), "-np", "1", "--no-webui"]
    if flags:
        command += ["--model-draft", str(setup.draft), *flags]
    return command, f"http://127.0.0.1:{port}"


# ----- the two parts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    target: Path
    draft: Path
    max_tokens: int
    repeat: int
    threads: int
    prompts: dict[str, str]
    llama_server: Path | None
    llama_configs: dict[str, list[str]]
    ctx: int = 4096
    """Each server's context, in tokens."""


def in_process(setup: Setup):  # type: ignore[no-untyped-def]
    """The reply core on this process's own load of the pair (what the server wraps)."""
    from spectui.chat.template import ChatFormat
    from spectui.engine.drafters import AUTO_KIND, DrafterSpec
    from spectui.engine.generator import load_generator
    from spectui.session import baseline

    # the drafters `spectui serve --target T --draft D` runs: auto (model+suffix)
    gen = load_generator(setup.target, DrafterSpec(AUTO_KIND, setup.draft), n_ctx=setup.ctx, n_threads=setup.threads)
    gen_format = ChatFormat.from_model(gen.target, "chat")
    prompt = gen.target.tokenize(baseline.COMPLETION_PROMPT)
    baseline.calibrate(gen, gen_format, prompt, lambda: False, tokens=8)  # what `spectui serve` does before listening
    return gen, gen_format


def local_reply(gen, chat_format, prompt: str, max_tokens: int) -> Reply:  # type: ignore[no-untyped-def]
    from spectui.engine.generation_config import AUTO, DraftControl, SamplingConfig
    from spectui.session.reply import ReplyDone, ReplyPiece, ReplyRequest, run_reply

    request = ReplyRequest(prompt=prompt, sampling=SamplingConfig(temperature=0.0), max_tokens=max_tokens,
                           draft=DraftControl(AUTO))
    start = time.perf_counter()
    first = last = None
    tokens = 0
    for event in run_reply(gen, chat_format, request):
        if isinstance(event, ReplyPiece) and event.text:
            now = time.perf_counter()
            first = first or now
            last = now
        elif isinstance(event, ReplyDone):
            tokens = event.figures.tokens
    assert first is not None and last is not None
    return Reply(tokens, first - start, last - first)


def overhead(setup: Setup, logs: Path) -> dict[str, object]:
    """Rounds of both sides, the order alternating; each side freshly loaded for its round (two
    loaded copies would run their llama.cpp threads against each other, and one generator shared
    by both would let the second side draft from the first side's reply)."""
    rows: dict[str, list[Reply]] = {"in_process": [], "api": []}
    for round_no in range(1, setup.repeat + 1):
        for side in (("in_process", "api") if round_no % 2 else ("api", "in_process")):
            replies = api_round(setup, logs, round_no) if side == "api" else local_round(setup, round_no)
            for name, reply in zip(setup.prompts, replies, strict=True):
                rows[side].append(reply)
                print(f"  overhead round {round_no} {name:6} {side:10} {reply.tokens:4d} tok "
                      f"{reply.tps:7.1f} tok/s  ttft {reply.ttft * 1000:7.1f} ms", file=sys.stderr)
    return summarize_overhead(rows)


def local_round(setup: Setup, round_no: int) -> list[Reply]:
    gen, chat_format = in_process(setup)
    try:
        return [local_reply(gen, chat_format, text, setup.max_tokens) for text in setup.prompts.values()]
    finally:
        gen.close()


def api_round(setup: Setup, logs: Path, round_no: int) -> list[Reply]:
    command, url = spectui_server(setup)
    with running(command, url, logs / f"spectui-serve-overhead-{round_no}.log"):
        return [ask(url, text, setup.max_tokens, {"temperature": 0}) for text in setup.prompts.values()]


def summarize_overhead(rows: dict[str, list[Reply]]) -> dict[str, object]:
    local, api = rows["in_process"], rows["api"]
    ratios = [a.tps / b.tps for a, b in zip(api, local, strict=True) if b.tps > 0]
    ttft_deltas = [(a.ttft - b.ttft) * 1000 for a, b in zip(api, local, strict=True)]
    return {
        "in_process_tps": round(median(r.tps for r in local), 2),
        "api_tps": round(median(r.tps for r in api), 2),
        "tps_ratio": round(median(ratios), 4),
        "tps_ratio_range": [round(min(ratios), 4), round(max(ratios), 4)],
        "in_process_ttft_ms": round(median(r.ttft for r in local) * 1000, 2),
        "api_ttft_ms": round(median(r.ttft for r in api) * 1000, 2),
        "ttft_delta_ms": round(median(ttft_deltas), 2),
        "ttft_delta_range_ms": [round(min(ttft_deltas), 2), round(max(ttft_deltas), 2)],
        "pairs": len(ratios),
        "goals": {"tps_ratio >= 0.95": median(ratios) >= GOALS["overhead_tps"],
                  "ttft_delta_ms <= 20": median(ttft_deltas) <= GOALS["overhead_ttft_ms"]},
    }


def versus_llama(setup: Setup, logs: Path) -> dict[str, object]:
    """spectui serve and every llama-server setting, asked in turn on every prompt. Every server
    starts afresh for each round and temperature: spectui's suffix lookup learns from the replies
    it has written, and a prompt asked again (or the T = 0 reply to it before the T = 0.8 one)
    would let it propose what it already wrote."""
    assert setup.llama_server is not None
    results: dict[str, dict[str, list[Reply]]] = {"T=0": {}, "T=0.8": {}}
    for round_no in range(1, setup.repeat + 1):
        for label, sampling in (("T=0", {"temperature": 0}), ("T=0.8", {**SAMPLED, "seed": round_no})):
            servers = {"spectui": spectui_server(setup)}
            servers |= {f"llama {name}": llama_server(setup, flags) for name, flags in setup.llama_configs.items()}
            with ExitStack() as stack:
                for name, (command, url) in servers.items():
                    log = logs / f"{re.sub(r'[^a-z0-9.]+', '-', name)}-{round_no}-{label}.log"
                    stack.enter_context(running(command, url, log))
                    ask(url, "Warm up.", 8, {"temperature": 0})
                order = list(servers.items())
                for prompt_name, text in setup.prompts.items():
                    order.reverse()  # who goes first alternates
                    for name, (_command, url) in order:
                        reply = ask(url, text, setup.max_tokens, sampling)
                        results[label].setdefault(name, []).append(reply)
                        print(f"  {label:5} round {round_no} {prompt_name:6} {name:40} {reply.tokens:4d} tok "
                              f"{reply.tps:7.1f} tok/s", file=sys.stderr)
    return summarize_llama(results)


def summarize_llama(results: dict[str, dict[str, list[Reply]]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for label, by_server in results.items():
        table = {name: {"tps": round(median(r.tps for r in replies), 2),
                        "server_tps": round(median(float(r.server_tps or 0) for r in replies), 2),
                        "tokens": sum(r.tokens for r in replies),
                        "drafted": sum(int(r.extra.get("draft_n") or 0) for r in replies),
                        "accepted": sum(int(r.extra.get("draft_n_accepted") or 0) for r in replies)}
                 for name, replies in by_server.items()}
        llama = {name: row for name, row in table.items() if name.startswith("llama")}
        best = max(llama, key=lambda name: llama[name]["tps"])
        ratio = table["spectui"]["tps"] / llama[best]["tps"] if llama[best]["tps"] else 0.0
        goal = GOALS["llama_t0"] if label == "T=0" else GOALS["llama_t08"]
        out[label] = {"servers": table, "best_llama": best, "ratio": round(ratio, 3), "goal": goal,
                      "met": ratio >= goal}
    return out


# ----- report -------------------------------------------------------------------------------------------


def report(results: dict[str, object]) -> None:
    if "overhead" in results:
        o = results["overhead"]
        print("\n== through the API vs in process (T = 0, K = auto)")
        print(f"tok/s   in process {o['in_process_tps']:8.1f}   API {o['api_tps']:8.1f}   ratio {o['tps_ratio']:.3f} "
              f"(rounds {o['tps_ratio_range'][0]:.3f}-{o['tps_ratio_range'][1]:.3f}; goal >= 0.95)")
        print(f"TTFT ms in process {o['in_process_ttft_ms']:8.1f}   API {o['api_ttft_ms']:8.1f}   "
              f"{o['ttft_delta_ms']:+.1f} ms (rounds {o['ttft_delta_range_ms'][0]:.1f} to "
              f"{o['ttft_delta_range_ms'][1]:.1f}; goal <= +20)")
    if "llama" in results:
        for label, entry in results["llama"].items():
            print(f"\n== spectui serve vs llama-server, {label}")
            for name, row in entry["servers"].items():
                rate = f"{row['accepted']}/{row['drafted']} accepted" if row["drafted"] else ""
                print(f"{name:40} {row['tps']:8.1f} tok/s  (server says {row['server_tps']:7.1f})  {rate}")
            verdict = "met" if entry["met"] else "NOT met"
            print(f"spectui / best llama-server ({entry['best_llama']}): {entry['ratio']:.2f}x "
                  f"(goal >= {entry['goal']}x: {verdict})")
    print(f"\nmachine: {os.cpu_count()} cores; others' load during the run is not controlled: run it on a quiet one")


def rendered(target: Path, text: str | Sequence[tuple[str, str]]) -> str:
    """`text` as one user turn (or these (role, content) turns) in the target's chat template (a
    base model's: the text itself)."""
    from spectui.chat.template import ChatFormat, ChatMessage
    from spectui.engine.model.llama_model import LlamaModel

    turns = [("user", text)] if isinstance(text, str) else text
    with LlamaModel.load(target, n_ctx=0, vocab_only=True) as model:
        return ChatFormat.from_model(model).render([ChatMessage(role, content) for role, content in turns])


def add_pair_arguments(parser: argparse.ArgumentParser, tiny: str) -> None:
    """--pair, --target, --draft and --tiny (`tiny`: what it runs)."""
    parser.add_argument("--pair", default="demo", help="a built-in demo pair: demo (chat, default) or demo-base")
    parser.add_argument("--target", type=Path, help="another target GGUF (default: the demo pair's)")
    parser.add_argument("--draft", type=Path, help="its draft GGUF (with --target)")
    parser.add_argument("--tiny", action="store_true", help=f"the tiny test pair, {tiny}: checks the script")


def pair_files(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Path, Path]:
    """The target and draft the arguments name (the demo pair is built first if it is not there)."""
    if args.target:
        if args.draft is None:
            parser.error("--target needs --draft")
        return args.target, args.draft
    if args.tiny:
        return tiny_pair()
    from spectui.catalog.demo import ensure_demo_pair

    pair = ensure_demo_pair(args.pair)
    return pair.target, pair.draft


def write_results(results: dict[str, object], out: Path | None) -> None:
    if out:
        out.write_text(json.dumps(results, indent=2))
        print(f"results written to {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pair_arguments(parser, "32 tokens, 1 round")
    parser.add_argument("--part", choices=("overhead", "llama", "all"), default="all")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3; --tiny 1)")
    parser.add_argument("--max-tokens", type=int, default=None, help="tokens per reply (default 256; --tiny 32)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--prompt", action="append", choices=sorted(PROMPTS), help="only these prompts (repeatable)")
    parser.add_argument("--llama-server", type=Path, default=None,
                        help="llama-server (default: the one scripts/build_llama_cpp.sh built)")
    parser.add_argument("--llama-config", action="append", choices=sorted(LLAMA_CONFIGS),
                        help="only these llama-server settings (repeatable; default: all)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    target, draft = pair_files(parser, args)
    llama = args.llama_server or default_llama_bin("llama-server")
    if args.part in ("llama", "all") and llama is None:
        parser.error("no llama-server found: run scripts/build_llama_cpp.sh or pass --llama-server")
    prompts = {name: rendered(target, text) for name, text in PROMPTS.items() if not args.prompt or name in args.prompt}
    configs = {name: flags for name, flags in LLAMA_CONFIGS.items()
               if not args.llama_config or name in args.llama_config}
    setup = Setup(target, draft, args.max_tokens or (32 if args.tiny else 256), args.repeat or (1 if args.tiny else 3),
                  args.threads, prompts, llama, configs)
    logs = Path(tempfile.mkdtemp(prefix="spectui-bench-serve-"))
    print(f"server logs in {logs}", file=sys.stderr)
    results: dict[str, object] = {"target": str(target), "draft": str(draft), "max_tokens": setup.max_tokens,
                                  "repeat": setup.repeat, "threads": setup.threads, "prompts": list(prompts)}
    if args.part in ("overhead", "all"):
        results["overhead"] = overhead(setup, logs)
    if args.part in ("llama", "all"):
        results["llama"] = versus_llama(setup, logs)
    report(results)
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
