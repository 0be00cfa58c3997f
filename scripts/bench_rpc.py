"""Speculation with the target on llama.cpp RPC workers: tokens/sec and network round trips per
token, speculation on vs. off, as the network gets slower.

    python scripts/bench_rpc.py [--tiny | --pair demo-base | --target T.gguf --draft D.gguf]
        [--workers 2] [--delays 0,2,20] [--netem auto|off] [-k 3,5,auto] [--max-tokens 128]
        [--repeat 1] [--json results.json]

It starts `--workers` `spectui worker` processes on 127.0.0.1, loads the target split over them
(the draft stays in this process) and, for every network setting and K, generates one reply at
T = 0 after a warm-up reply (llama.cpp asks a worker for allocation sizes the first time it sees
a batch shape: one-off round trips kept out of the figures). Network settings:

* `relay +D ms`: spectui's relay (spectui/engine/rpc/relay.py) holds every answer D ms, i.e.
  D ms more round-trip time; bandwidth is not limited.
* `netem D ms` (`--netem auto`, root and a kernel with sch_netem): the workers run in a network
  namespace behind a veth pair with `tc netem delay D/2 ms` on each side.

Columns: tok/s is decode tokens over decode time (the prompt pass excluded); speedup is against
K = 0 on the same network; round trips, worker wait and bytes are per generated token of the
decode phase, counted by the relay. Run it on an otherwise idle machine: tok/s is wall-clock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from statistics import median

from spectui import faults
from spectui.bench import DEFAULT_PROMPTS, workload
from spectui.cli import parse_k_list
from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator, load_generator
from spectui.session.reply import prepare
from spectui.worker import WorkerProcess, spawn

NETNS_HOST, NETNS_PEER = "10.231.0.1", "10.231.0.2"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def workers(count: int, threads: int, host: str = "127.0.0.1", wrapper: Sequence[str] = ()) -> Iterator[str]:
    """`count` workers; yields their `--rpc` list."""
    started: list[WorkerProcess] = []
    try:
        for _ in range(count):
            started.append(spawn(host, free_port(), threads=threads, wrapper=wrapper))
        yield ",".join(worker.endpoint for worker in started)
    finally:
        for worker in started:
            worker.stop()


def sh(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=check)


@contextmanager
def netem_namespace() -> Iterator[tuple[list[str], callable]]:
    """A namespace behind a veth pair; yields (command prefix, set_rtt(ms)). Raises
    RuntimeError saying why when this machine cannot do it."""
    ns, near, far = f"spectui-bench-{os.getpid()}", f"sbh{os.getpid() % 100000}", f"sbn{os.getpid() % 100000}"
    inside = ["ip", "netns", "exec", ns]
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", near, "type", "veth", "peer", "name", far)
        sh("ip", "link", "set", far, "netns", ns)
        sh("ip", "addr", "add", f"{NETNS_HOST}/30", "dev", near)
        sh("ip", "link", "set", near, "up")
        sh(*inside, "ip", "addr", "add", f"{NETNS_PEER}/30", "dev", far)
        sh(*inside, "ip", "link", "set", far, "up")
        sh(*inside, "ip", "link", "set", "lo", "up")

        def set_rtt(ms: float) -> None:
            for prefix, dev in (((), near), (tuple(inside), far)):
                sh(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay", f"{ms / 2:g}ms")

        set_rtt(0)
        yield inside, set_rtt
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        raise RuntimeError(f"no netem namespace here: {' '.join(error.cmd) if hasattr(error, 'cmd') else ''}: "
                           f"{detail.strip()}") from None
    finally:
        sh("ip", "link", "del", near, check=False)
        sh("ip", "netns", "del", ns, check=False)


def one_reply(gen: Generator, prompt: list[int], k: int | str, max_tokens: int) -> dict[str, object]:
    """One reply; traffic counted from the end of the prompt pass (the first event) to the end."""
    cluster = gen.target.rpc
    gen.reset()
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig(temperature=0.0))
    after_prompt = None
    for event in gen.generate(prompt, config, DraftControl(k)):
        if after_prompt is None:
            after_prompt = cluster.traffic()
        if isinstance(event, Finished):
            final = event
    faults.raise_for(final)  # a worker lost mid-run: no figures from the cut run
    traffic = cluster.traffic() - after_prompt
    stats = final.stats
    tokens = max(stats.decode_tokens, 1)
    return {
        "k": k, "tokens": stats.decode_tokens, "tok_s": stats.decode_tps,
        "round_trips_per_token": traffic.round_trips / tokens,
        "wait_ms_per_token": 1000 * traffic.wait_seconds / tokens,
        "kb_sent_per_token": traffic.bytes_sent / 1024 / tokens,
        "kb_received_per_token": traffic.bytes_received / 1024 / tokens,
        "target_passes": stats.target_passes, "mean_accepted": stats.mean_accepted,
        "acceptance_rate": stats.acceptance_rate, "output": list(final.tokens), "reason": final.reason,
    }


def measure(gen: Generator, network: str, prompt: list[int], ks: list, max_tokens: int, repeat: int) -> list[dict]:
    for k in ks:
        one_reply(gen, prompt, k, min(max_tokens, 32))  # warm-up: first-seen batch shapes
    runs: dict[object, list[dict]] = {k: [] for k in ks}
    for _ in range(repeat):  # interleaved, so drift hits every K alike
        for k in ks:
            runs[k].append(one_reply(gen, prompt, k, max_tokens))
    rows = []
    for k in ks:
        row = dict(runs[k][-1], network=network, tok_s=median(r["tok_s"] for r in runs[k]))
        rows.append(row)
    base = next((r for r in rows if r["k"] == 0), None)
    for row in rows:
        row["speedup"] = row["tok_s"] / base["tok_s"] if base and base["tok_s"] else None
        row["identical"] = row["output"] == base["output"] if base else None
        print(f"  {network:>14} K={row['k']!s:>4}: {row['tok_s']:6.1f} tok/s, "
              f"{row['round_trips_per_token']:.2f} round trips/token", file=sys.stderr, flush=True)
    return rows


def resolve_pair(args: argparse.Namespace) -> tuple[Path, Path]:
    if args.target and args.draft:
        return Path(args.target), Path(args.draft)
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import tiny_gguf

        pair = tiny_gguf.write_pair(Path(tempfile.mkdtemp(prefix="spectui-bench-rpc-")))
        return pair.target, pair.draft
    from spectui.catalog import demo

    pair = demo.ensure_demo_pair(args.pair)
    return Path(pair.target), Path(pair.draft)


def run(args: argparse.Namespace) -> dict[str, object]:
    target, draft = resolve_pair(args)
    ks = args.draft_length if 0 in args.draft_length else [0, *args.draft_length]
    delays = [float(d) for d in args.delays.split(",")]
    threads = args.threads or max(1, (os.cpu_count() or 2) // args.workers)
    args.client_threads = args.client_threads or threads
    rows: list[dict] = []
    notes: list[str] = []
    with workers(args.workers, threads) as endpoints:
        gen = load_generator(target, draft, n_ctx=args.ctx, rpc=endpoints, n_threads=args.client_threads)
        work = workload(gen, [args.prompt], GenerationConfig(), None)
        prompt = prepare(gen, work.chat_format, work.request(args.prompt, 0)).tokens  # as bench renders it
        cluster = gen.target.rpc
        layers = dict(cluster.layer_plan(gen.target.n_layer))
        placed = cluster.placed_bytes()
        devices = [{"name": d.name, "endpoint": str(d.endpoint), "layers": layers.get(d.name),
                    "bytes_on_worker": placed[str(d.endpoint)]} for d in cluster.devices]
        try:
            for delay in delays:
                gen.target.rpc.set_delay(delay / 1000)
                rows += measure(gen, f"relay +{delay:g} ms", prompt, ks, args.max_tokens, args.repeat)
        finally:
            gen.close()
    if args.netem == "auto":
        try:
            with netem_namespace() as (inside, set_rtt), workers(args.workers, threads, NETNS_PEER, inside) as eps:
                gen = load_generator(target, draft, n_ctx=args.ctx, rpc=eps, n_threads=args.client_threads)
                try:
                    for delay in delays:
                        set_rtt(delay)
                        rows += measure(gen, f"netem {delay:g} ms", prompt, ks, args.max_tokens, args.repeat)
                finally:
                    gen.close()
        except RuntimeError as error:
            notes.append(str(error))
            print(f"netem skipped: {error}", file=sys.stderr)
    for row in rows:
        del row["output"]
    return {"target": str(target), "draft": str(draft), "workers": args.workers, "worker_threads": threads,
            "devices": devices, "max_tokens": args.max_tokens, "repeat": args.repeat,
            "machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".strip(),
            "notes": notes, "rows": rows}


def print_table(result: dict[str, object]) -> None:
    print(f"{'network':>14} {'K':>4} {'tok/s':>7} {'speedup':>7} {'RT/tok':>6} {'wait ms/tok':>11} "
          f"{'KB out/tok':>10} {'KB in/tok':>9} {'tok/pass':>8} {'same':>5}")
    for r in result["rows"]:
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        print(f"{r['network']:>14} {r['k']!s:>4} {r['tok_s']:7.1f} {speedup:>7} {r['round_trips_per_token']:6.2f} "
              f"{r['wait_ms_per_token']:11.2f} {r['kb_sent_per_token']:10.1f} {r['kb_received_per_token']:9.1f} "
              f"{r['mean_accepted']:8.2f} {'yes' if r['identical'] else 'NO':>5}")
    for note in result["notes"]:
        print(f"note: {note}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the test suite's tiny random pair (a quick check)")
    parser.add_argument("--pair", default="demo-base", choices=("demo-base", "demo"),
                        help="a built-in demo pair (default demo-base, Gemma 3 270M: the figures in docs/RPC.md)")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="threads per worker (default: cores / workers)")
    parser.add_argument("--client-threads", type=int, default=None,
                        help="threads for the local draft (default: as --threads; one machine runs all three)")
    parser.add_argument("--delays", default="0,2,20", help="added round-trip times in ms")
    parser.add_argument("--netem", choices=("auto", "off"), default="auto")
    parser.add_argument("-k", "--draft-length", type=parse_k_list, default=[3, 5, "auto"],
                        help="draft lengths to measure (K = 0, the baseline, is always measured)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--prompt", default=DEFAULT_PROMPTS[0])
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    result = run(args)
    print_table(result)
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
