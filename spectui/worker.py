"""`spectui worker`: serve this machine's CPU/GPU to another machine's spectui over llama.cpp RPC.

The server is llama.cpp's own (`ggml_backend_rpc_start_server`), started from the same library
spectui uses, so a second machine needs only spectui. It runs in a thread whose SIGINT, SIGTERM
and SIGHUP are blocked, so they reach Python's main thread, which says one line and exits with
128 + the signal (130 for Ctrl+C; the C server cannot be stopped from outside, so the process
ends without unwinding it).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TypeVar

from spectui import argtypes, limits, signals
from spectui.errors import Interrupted, RpcError

Parser = TypeVar("Parser", bound=argparse.ArgumentParser)
"""The command line's parser class (`spectui.cli.Parser`), which this module, below it, does not import."""

WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
WARNING: Host ('{host}') is != '127.0.0.1'
         Never expose the RPC server to an open network!
         This is an experimental feature and is not secure!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
(llama.cpp's warning, tools/rpc/rpc-server.cpp.) The RPC protocol has no authentication:
anyone who reaches {host}:{port} can use this machine's memory and compute.
Safer: keep the default --host 127.0.0.1 and tunnel from the chat machine:
    ssh -N -L {port}:127.0.0.1:{port} USER@THIS-MACHINE      then   spectui chat --rpc 127.0.0.1:{port}
or let only the chat machine in, e.g.  sudo ufw allow from CHAT-MACHINE-IP to any port {port} proto tcp
"""


def add_worker_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    worker = sub.add_parser("worker", help="lend this machine to another spectui's target (llama.cpp RPC)")
    worker.add_argument("--host", type=parse_host, default="127.0.0.1",
                        help="IPv4 address or host name to listen on (default 127.0.0.1; anything else is "
                        "reachable by others); llama.cpp's RPC server listens on IPv4 only")
    worker.add_argument("--port", type=argtypes.int_range(1, 65535), default=50052,
                        help="port to listen on, 1..65535 (default 50052)")
    worker.add_argument("--threads", type=argtypes.threads, default=None,
                        help=f"CPU threads, 1..{limits.MAX_THREADS} (default: all cores)")
    worker.add_argument("--cache", type=argtypes.path, default=None, metavar="DIR",
                        help="keep received weights in folder DIR (created if missing) so the next load "
                        "skips sending them")


def parse_host(value: str) -> str:
    """An IPv4 address or a host name: llama.cpp's server binds an `AF_INET` socket to
    `inet_addr(host)` (ggml/src/ggml-rpc/transport.cpp, `socket_t::create_server`), so an IPv6
    address cannot be served; an empty one would mean every interface (`0.0.0.0`) unasked."""
    host = value.strip()
    if not host:
        raise argparse.ArgumentTypeError("must be an IPv4 address or a host name, e.g. 127.0.0.1, not ''")
    if ":" in host or host.startswith("["):
        raise argparse.ArgumentTypeError(
            f"{value!r} is an IPv6 address, and llama.cpp's RPC server listens on IPv4 only; use 127.0.0.1 "
            "(this machine), or 0.0.0.0 (every IPv4 interface, reachable by others)")
    return host


def worker_command(args: argparse.Namespace) -> int:
    from spectui.engine import rpc
    from spectui.engine.rpc import wire as rpc_wire

    rpc.require_rpc()
    host = _ipv4(args.host)
    _check_port_free(host, args.port)
    cache = _cache_folder(args.cache) if args.cache else None
    if host != "127.0.0.1":
        print(WARNING.format(host=host, port=args.port), file=sys.stderr)
    devices = ", ".join(text for _, text in rpc.worker_devices())
    version = rpc_wire.version_text(rpc_wire.PROTOCOL_VERSION)
    print(f"spectui worker: serving {devices} on {host}:{args.port} (llama.cpp RPC {version}); "
          "Ctrl+C stops it", file=sys.stderr, flush=True)
    threads = args.threads or os.cpu_count() or 1
    failed: list[BaseException] = []
    server = threading.Thread(target=_serve_blocking_sigint, name="rpc-server", daemon=True,
                              args=(host, args.port, threads, cache, failed))
    server.start()
    try:
        with signals.stop_signals_raise():
            while server.is_alive():
                server.join(0.5)
    except KeyboardInterrupt:
        _exit_now("spectui worker: stopped", 130)
    except Interrupted as stopped:
        _exit_now(f"spectui worker: stopped ({signal.Signals(stopped.signum).name})", 128 + stopped.signum)
    if failed:
        raise failed[0]
    raise RpcError(f"llama.cpp could not listen on {host}:{args.port}; pick another --port or --host")


def _serve_blocking_sigint(host: str, port: int, threads: int, cache: str | None,
                           failed: list[BaseException]) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    from spectui.engine import rpc

    try:
        rpc.serve(host, port, threads, cache)
    except BaseException as error:  # handed to the main thread, which reports it
        failed.append(error)


def _ipv4(host: str) -> str:
    """llama.cpp's server binds only a dotted IPv4 address (`inet_addr`, transport.cpp:715-741)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        raise RpcError(f"worker --host {host!r}: no IPv4 address by that name here; use e.g. 127.0.0.1 "
                       "or 0.0.0.0") from None


def _cache_folder(folder: str) -> str:
    """`--cache DIR` as a folder this user can write (created if missing)."""
    path = os.path.expanduser(folder)
    if os.path.exists(path) and not os.path.isdir(path):
        raise RpcError(f"worker --cache {folder}: that is a file, not a folder; give a folder for the received "
                       "weights (it is created if missing)")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise RpcError(f"worker --cache {folder}: cannot write there ({error.strerror or error}); give another "
                       "folder") from None
    return path


def _check_port_free(host: str, port: int) -> None:
    """Fail in one line before llama.cpp prints only 'Failed to create server socket'."""
    if not 0 < port < 65536:
        raise RpcError(f"--port must be 1..65535, not {port}")
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as error:
        raise RpcError(f"cannot listen on {host}:{port} ({error.strerror}); pick another --port or --host") from None
    finally:
        probe.close()


def _exit_now(line: str, code: int) -> None:
    """Print `line` and end the process at once, C stdio flushed (the server thread never returns)."""
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    ctypes.CDLL(None).fflush(None)
    os._exit(code)


@dataclass
class WorkerProcess:
    """A `spectui worker` subprocess (tests, benchmarks); its stderr goes to a temporary file,
    never a pipe nobody reads."""

    process: subprocess.Popen[str]
    endpoint: str
    log: IO[str]

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


def spawn(host: str, port: int, *, threads: int | None = None, wrapper: Sequence[str] = (),
          timeout: float = 60.0) -> WorkerProcess:
    """Start `python -m spectui worker` (inside `wrapper`, e.g. `ip netns exec NS`) and wait until
    it answers a handshake."""
    from spectui.engine.rpc import wire as rpc_wire

    command = [*wrapper, sys.executable, "-m", "spectui", "worker", "--host", host, "--port", str(port)]
    if threads:
        command += ["--threads", str(threads)]
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - the WorkerProcess owns and closes it
    worker = WorkerProcess(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True),
                           f"{host}:{port}", log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            rpc_wire.probe(rpc_wire.Endpoint(host, port), timeout=2.0)
            return worker
        except RpcError:
            if worker.process.poll() is not None or time.monotonic() > deadline:
                worker.process.kill()
                worker.process.wait()
                output = worker.output().strip()[-300:]
                worker.stop()
                raise RpcError(f"worker on {host}:{port} did not start: {output}") from None
            time.sleep(0.1)
