"""`spectui serve`: load a pair, warm it up, and answer OpenAI-compatible requests with it.

It binds 127.0.0.1 by default; any other address needs an API key (`--api-key` or
`SPECTUI_API_KEY`), since whoever reaches the port runs the models. The socket is bound and served
before the models load, so a port in use is one line at once, not after a minute of loading, and
`/health` says 503 "Loading model" (as llama-server does) until they are in. Ctrl+C stops
taking requests and lets the replies under way (and those waiting) finish, for at most
`--drain-seconds`; a second Ctrl+C stops at once. Either way the models are freed and the exit
code is 0.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from collections.abc import Callable

    from spectui.serve.app import ServerState, Serving
    from spectui.serve.draining import DrainingServer
    from spectui.serve.slot import ReplySlot
    from spectui.session.loaded import EngineSession
    from spectui.session.options import ModelChoice
    from spectui.session.pair_load import LoadPlan

API_KEY_ENV = "SPECTUI_API_KEY"
DEFAULT_PORT = 8080
DEFAULT_DRAIN_SECONDS = 30.0
DEFAULT_MAX_WAITING = 8
WARM_UP_TOKENS = 8
"""Tokens the calibration after the load times (`--no-warm-up`: none): the weights touched and
K = auto seeded before the first request; its baseline is not used."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key_of(args: argparse.Namespace) -> str | None:
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        raise SpectuiError(f"the API key is empty: give a real one with --api-key or {API_KEY_ENV}")
    return key


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (before anything slow), or one line saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it the head and the body of a response, written
    # apart, wait for the client's delayed ACK, about 40 ms a request (measured: /health 44 ms -> 0.4 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise SpectuiError(f"port {port} on {host} is in use (another server?): pick another with --port") from None
        raise SpectuiError(f"cannot listen on {host}:{port} ({error.strerror or error}): check --host and --port") \
            from None
    sock.listen(128)
    return sock


def serve_command(args: argparse.Namespace) -> int:
    key = api_key_of(args)
    if not is_loopback(args.host) and key is None:
        raise SpectuiError(f"--host {args.host} would let anyone who can reach this machine use the models: "
                           f"set an API key with --api-key KEY or {API_KEY_ENV}, or keep the default 127.0.0.1")
    sock = bind(args.host, args.port)
    try:
        loading = prepare(args, key)
    except BaseException:
        sock.close()
        raise
    return run(args, sock, loading)


@dataclass
class Loading:
    """A pair on its way in: what is known before the load (the files, the plan, the engine
    thread), what the app serves (nothing until `finish`), and why the load failed, if it did."""

    args: argparse.Namespace
    key: str | None
    choice: ModelChoice
    plan: LoadPlan
    label: str
    session: EngineSession
    slot: ReplySlot
    serving: Serving
    error: BaseException | None = None


def prepare(args: argparse.Namespace, key: str | None) -> Loading:
    """Everything before the load itself: the files and their memory plan (one line when they
    will not do), and the engine thread the load and every reply will run on."""
    from spectui.serve.app import Serving
    from spectui.serve.slot import ReplySlot
    from spectui.session.loaded import EngineSession
    from spectui.session.options import models_from_args
    from spectui.session.pair_load import LoadSpec

    choice = models_from_args(args)
    session = EngineSession()
    warm_up = None if args.no_warm_up else WARM_UP_TOKENS
    plan = session.plan(LoadSpec.of_command(args, choice, mode="chat", calibration_tokens=warm_up))
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    label = f"{choice.target.name} + {choice.drafter.draft.name}" if choice.drafter.draft else choice.target.name
    threads = plan.threads
    print(f"spectui serve: loading {label} ({threads} thread{'s' if threads > 1 else ''}) ...", file=sys.stderr)
    return Loading(args, key, choice, plan, label, session, ReplySlot(session, args.max_waiting), Serving())


def finish(loading: Loading) -> ServerState:
    """Load the pair and warm it up (weights touched, K = auto seeded) on the engine thread, where
    every reply will run (see `serve.slot`); then the app serves it. Its `ServerState`."""
    from spectui.serve.app import ServerState
    from spectui.serve.convert import Defaults

    args, choice, session, slot = loading.args, loading.choice, loading.session, loading.slot
    try:
        pair = slot.call(lambda: session.load(loading.plan))
    except BaseException:
        slot.close()
        raise
    assert pair is not None  # never cancelled
    info = pair.drafters
    for note in info.notes:
        print(f"note: {note}", file=sys.stderr)
    sampling = _overridden(pair.sampling.sampling, args)
    kind = None if choice.drafter.kind == "auto" else choice.drafter.kind
    k = args.draft_length if args.draft_length is not None else (choice.recommended_k or "auto")
    defaults = Defaults(sampling, args.max_tokens, k, kind)
    name = choice.pair_name if choice.pair_name != "custom" else None
    names = [n for n in dict.fromkeys([*args.alias, name, choice.target.stem, choice.target.name]) if n]
    model_id, aliases = names[0], tuple(names[1:])
    model_info = {
        "meta": {"target": choice.target.name, "draft": choice.drafter.draft.name if choice.drafter.draft else None,
                 "drafter": kind or info.default, "drafters": list(info.kinds), "drafter_labels": dict(info.labels),
                 "n_ctx": pair.n_ctx, "n_vocab": pair.n_vocab, "template": pair.template},
    }
    state = ServerState(slot, defaults, model_id, model_info, aliases, loading.key, args.strict_model,
                        n_ctx=pair.n_ctx)
    state.slot.on_done = lambda done: state.metrics.reply(done.figures)
    loading.serving.state = state
    return state


def _overridden(sampling, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The model's recommended sampling with what the command line set."""
    from dataclasses import replace

    changes = {name: getattr(args, name) for name in ("temperature", "top_k", "top_p", "min_p", "seed")
               if getattr(args, name, None) is not None}
    return replace(sampling, **changes)


def run(args: argparse.Namespace, sock: socket.socket, loading: Loading) -> int:
    """Serve from now on (503 "Loading model" until the pair is in), load it on a thread of its
    own, and return when the server stops; a failed load stops it and is raised here."""
    server = build_server(args, loading)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host

    def ready(state: ServerState) -> None:
        print(f"spectui serve: {loading.label} as model {state.model_id!r} on http://{shown}:{port}/v1"
              f"{' (API key required)' if state.api_key else ''}; Ctrl+C stops", file=sys.stderr, flush=True)

    load_in_background(loading, server, ready)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if loading.error is not None:
        raise loading.error
    if server.interrupted:
        print("spectui serve: stopped", file=sys.stderr)
    return 0


def load_in_background(loading: Loading, server: DrainingServer,
                       ready: Callable[[ServerState], None] = lambda _state: None) -> threading.Thread:
    """`finish` the load on a thread of its own while `server` answers; a failure is kept in
    `loading.error` and stops the server."""

    def load() -> None:
        try:
            state = finish(loading)
        except BaseException as error:  # raised again on the main thread, once the server stopped
            loading.error = error
            server.should_exit = True
            return
        ready(state)

    thread = threading.Thread(target=load, name="spectui-load", daemon=True)
    thread.start()
    return thread


def build_server(args: argparse.Namespace, loading: Loading) -> DrainingServer:
    """The uvicorn server for the app `loading` will fill; it frees the models when it shuts down."""
    import uvicorn

    from spectui.serve.app import build_app
    from spectui.serve.draining import DrainingServer

    def shut_down() -> None:
        """Stop every reply, then free the models on the engine thread."""
        if loading.serving.state is None:  # stopped while loading (or the load failed): nothing to wait for
            loading.slot.close(timeout=0.0, last=loading.session.close)
            return
        if not loading.slot.close(timeout=10.0, last=loading.session.close):
            print("spectui serve: a reply did not stop in time; exiting without freeing the models", file=sys.stderr)

    app = build_app(loading.serving, on_shutdown=shut_down)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=args.drain_seconds, timeout_keep_alive=30)
    return DrainingServer(config)
