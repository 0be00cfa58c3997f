"""A counting relay between llama.cpp's RPC client and one worker, on 127.0.0.1 in-process.

llama.cpp connects to the relay instead of the worker; the relay forwards every message and

* counts them: a command the worker answers is one network round trip the client waits for,
  the others (SET_TENSOR, GRAPH_COMPUTE, ...) are one-way and pipelined (docs/RPC.md);
* can add a fixed latency to every answer, to measure what a slower network would cost;
* keeps the process alive when the worker dies. llama.cpp aborts the process on any failed
  send or receive (`RPC_STATUS_ASSERT` -> GGML_ABORT, ggml/src/ggml-rpc/ggml-rpc.cpp:35 and
  `rpc_dispatcher::work`, :557-575). The relay instead notes the loss and answers llama.cpp's
  remaining commands with well-formed dummies (`wire.fake_response`); spectui checks
  `lost` after every decode and throws those results away.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from spectui.engine.rpc.wire import (
    RESPONSE_SIZE,
    Cmd,
    Endpoint,
    fake_response,
    hello_payload,
    is_compatible,
    response,
    version_text,
)

CHUNK = 1 << 20
_used_ports: set[int] = set()
"""Relay ports handed to llama.cpp in this process: llama.cpp caches registries, buffer types
and allocation sizes by endpoint string forever (ggml-rpc.cpp:1089-1117, :2338-2345), so a new
relay must never reuse an old relay's address."""


@dataclass
class Traffic:
    """What went over the wire between llama.cpp and the workers."""

    round_trips: int = 0
    """Commands the worker answered: each one the client waited a full network round trip for."""
    messages: int = 0
    """Every command sent, one-way ones included."""
    bytes_sent: int = 0
    """Bytes from this machine to the workers (weights at load time, then activations, graphs)."""
    bytes_received: int = 0
    """Bytes from the workers (hidden states between workers, logits)."""
    wait_seconds: float = 0.0
    """Time from a request reaching the relay to its answer leaving it, added latency included."""
    by_command: Counter[str] = field(default_factory=Counter)
    """Messages per command name (GRAPH_COMPUTE, GET_TENSOR, ...)."""

    def copy(self) -> Traffic:
        return replace(self, by_command=Counter(self.by_command))

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.round_trips + other.round_trips, self.messages + other.messages,
                       self.bytes_sent + other.bytes_sent, self.bytes_received + other.bytes_received,
                       self.wait_seconds + other.wait_seconds, self.by_command + other.by_command)

    def __sub__(self, other: Traffic) -> Traffic:
        by_command = Counter(self.by_command)
        by_command.subtract(other.by_command)
        return Traffic(self.round_trips - other.round_trips, self.messages - other.messages,
                       self.bytes_sent - other.bytes_sent, self.bytes_received - other.bytes_received,
                       self.wait_seconds - other.wait_seconds, +by_command)


class Relay:
    """Listens on 127.0.0.1:`address.port`; each connection llama.cpp opens gets its own
    connection to `upstream` (llama.cpp opens short ones while probing devices, then one that
    lives as long as the model)."""

    def __init__(self, upstream: Endpoint, *, delay: float = 0.0, connect_timeout: float = 10.0) -> None:
        self.upstream = upstream
        self.delay = delay
        """Seconds added to every answered command (an extra network round-trip time)."""
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._traffic = Traffic()
        self._lost: str | None = None
        self._buffers: dict[int, dict[int, int]] = {}
        self._sessions: set[_Session] = set()
        self._listener = _listen_on_new_port()
        self.address = Endpoint("127.0.0.1", self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept_loop, name=f"rpc-relay {upstream}", daemon=True).start()

    @property
    def lost(self) -> str | None:
        """Why the worker stopped answering, or None while it is well."""
        return self._lost

    def traffic(self) -> Traffic:
        with self._lock:
            return self._traffic.copy()

    def placed_bytes(self) -> int:
        """Bytes of buffers llama.cpp holds on the worker now (weights, KV cache, compute)."""
        with self._lock:
            return sum(sum(buffers.values()) for buffers in self._buffers.values())

    def poll(self) -> None:
        """Note the worker as lost when a connection to it has closed or failed while idle.

        Between commands a worker sends nothing, so an upstream socket that reads as ready holds
        either an end of file (the worker process ended: a restarted worker is a new process that
        holds none of our buffers) or an error. Call only while no command is in flight."""
        with self._lock:
            sessions = [s for s in self._sessions if s.upstream is not None]
        for session in sessions:
            if (reason := session.idle_fault()) is not None:
                self.lose(reason)

    def close(self) -> None:
        """Stop accepting; connections end when llama.cpp closes them (after the model is freed)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    # ----- internals ---------------------------------------------------------------------------

    def lose(self, reason: str) -> None:
        with self._lock:
            if self._lost is None:
                self._lost = f"worker {self.upstream} stopped answering ({reason})"

    def record(self, cmd: Cmd, sent: int, received: int, waited: float | None) -> None:
        with self._lock:
            t = self._traffic
            t.messages += 1
            t.by_command[cmd.name] += 1
            t.bytes_sent += sent
            t.bytes_received += received
            if waited is not None:
                t.round_trips += 1
                t.wait_seconds += waited

    def track_buffer(self, session: int, remote_ptr: int, size: int | None) -> None:
        """Note an allocated (size) or freed (None) buffer of one connection."""
        with self._lock:
            buffers = self._buffers.setdefault(session, {})
            if size is None:
                buffers.pop(remote_ptr, None)
            elif remote_ptr:
                buffers[remote_ptr] = size

    def end_session(self, session: int) -> None:
        """The worker frees a connection's buffers when it closes (rpc_server::~rpc_server)."""
        with self._lock:
            self._buffers.pop(session, None)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True,
                             name=f"rpc-relay session {self.upstream}").start()

    def _serve(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        session = _Session(self, client, self._connect_upstream())
        with self._lock:
            self._sessions.add(session)
        try:
            session.run()
        except OSError:
            pass  # llama.cpp closed its end mid-message: nothing is waiting for this session
        finally:
            with self._lock:
                self._sessions.discard(session)
            session.close()
            self.end_session(id(session))

    def _connect_upstream(self) -> socket.socket | None:
        if self._lost is not None:
            return None
        try:
            sock = socket.create_connection((self.upstream.host, self.upstream.port), timeout=self.connect_timeout)
        except OSError as error:
            self.lose(f"cannot connect: {error.strerror or error}")
            return None
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _keep_alive(sock)
        return sock


class _Reader:
    """Buffered reads: llama.cpp writes a message in three small sends (ggml-rpc.cpp:309-322);
    reading them in one recv keeps the relay's cost per message low. `on_block` runs before
    every recv that may wait."""

    def __init__(self, sock: socket.socket, on_block: Callable[[], None] = lambda: None) -> None:
        self.sock = sock
        self.on_block = on_block
        self.buf = bytearray()

    def read(self, n: int) -> bytes | None:
        """Exactly n bytes, or None when the peer closed first."""
        while len(self.buf) < n:
            self.on_block()
            chunk = self.sock.recv(max(1 << 16, min(n - len(self.buf), CHUNK)))
            if not chunk:
                return None
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


class _Session:
    """One llama.cpp connection: read a command, forward it, forward its answer (if any).

    One-way commands are queued and sent together when the relay would otherwise wait (for
    llama.cpp's next bytes or for an answer), which is when llama.cpp's own socket would have
    carried them too."""

    def __init__(self, relay: Relay, client: socket.socket, upstream: socket.socket | None) -> None:
        self.relay = relay
        self.client = client
        self.client_in = _Reader(client, on_block=self._flush)
        self.upstream = upstream
        self.upstream_in = _Reader(upstream) if upstream is not None else None
        self.pending = bytearray()

    def run(self) -> None:
        while True:
            head = self.client_in.read(9)
            if head is None:
                return
            cmd_id, size = struct.unpack("<BQ", head)
            try:
                cmd = Cmd(cmd_id)
            except ValueError:
                self.relay.lose(f"llama.cpp sent unknown RPC command {cmd_id}")
                return
            answered = cmd in RESPONSE_SIZE
            if answered or size <= CHUNK:
                payload = self.client_in.read(size)
                if payload is None:
                    return
                if cmd == Cmd.HELLO:
                    payload = hello_payload()
                self._send(head + payload)
            else:
                payload = b""
                self._send(head)
                if not self._stream(size):
                    return
            if not answered:
                if cmd == Cmd.FREE_BUFFER:
                    self.relay.track_buffer(id(self), struct.unpack_from("<Q", payload)[0], None)
                self.relay.record(cmd, 9 + size, 0, None)
                continue
            self._flush()
            start = time.perf_counter()
            framed = self._answer(cmd, payload)
            if self.relay.delay > 0:
                time.sleep(self.relay.delay)
            waited = time.perf_counter() - start
            self.relay.record(cmd, 9 + size, len(framed), waited)  # before llama.cpp can go on
            self.client.sendall(framed)

    def close(self) -> None:
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()

    def idle_fault(self) -> str | None:
        """Why the idle upstream connection is gone (closed, reset), or None while it is open."""
        sock = self.upstream
        if sock is None or self.upstream_in is None or self.upstream_in.buf:
            return None
        try:
            ready, _, _ = select.select([sock], [], [], 0)
            if not ready:
                return None
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except (OSError, ValueError) as error:
            return f"its connection failed: {getattr(error, 'strerror', None) or error}"
        return "it closed the connection" if not data else None

    def _stream(self, size: int) -> bool:
        """Forward a large payload chunk by chunk after its header; False if llama.cpp closed."""
        left = size
        while left:
            chunk = self.client_in.read(min(CHUNK, left))
            if chunk is None:
                return False
            self._send(chunk)
            left -= len(chunk)
        return True

    def _send(self, data: bytes) -> None:
        if self.upstream is not None:
            self.pending += data
            if len(self.pending) >= CHUNK:
                self._flush()

    def _flush(self) -> None:
        if not self.pending or self.upstream is None:
            return
        try:
            self.upstream.sendall(self.pending)
        except OSError as error:
            self._drop(f"send failed: {error.strerror or error}")
        self.pending.clear()

    def _answer(self, cmd: Cmd, payload: bytes) -> bytes:
        """The worker's framed answer, or a dummy one once the worker is gone."""
        body = self._read_answer(cmd, payload) if self.upstream is not None else None
        if body is None:
            return fake_response(cmd, payload)
        if cmd == Cmd.ALLOC_BUFFER:
            remote_ptr, remote_size = struct.unpack("<QQ", body)
            self.relay.track_buffer(id(self), remote_ptr, remote_size)
        return response(body)

    def _read_answer(self, cmd: Cmd, payload: bytes) -> bytes | None:
        expected = RESPONSE_SIZE[cmd]
        if expected is None:
            (expected,) = struct.unpack_from("<Q", payload, len(payload) - 8)
        reader = self.upstream_in
        if reader is None:  # a session made without a worker: `_answer` fakes every reply
            return None
        try:
            head = reader.read(8)
            body = reader.read(expected) if head is not None else None
        except OSError as error:
            self._drop(f"receive failed: {error.strerror or error}")
            return None
        if head is None or body is None:
            self._drop("it closed the connection")
            return None
        if struct.unpack("<Q", head)[0] != expected:
            self._drop(f"it answered {cmd.name} with a malformed reply")
            return None
        if cmd == Cmd.HELLO:
            version = (body[0], body[1], body[2])
            if not is_compatible(version):
                self._drop(f"it speaks RPC protocol {version_text(version)}")
                return None
            body = body[:4] + bytes(len(body) - 4)  # no RDMA through a relay
        return body

    def _drop(self, reason: str) -> None:
        self.relay.lose(reason)
        self.pending.clear()
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None


def _listen_on_new_port() -> socket.socket:
    while True:
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        if port not in _used_ports:
            _used_ports.add(port)
            return listener
        listener.close()


def _keep_alive(sock: socket.socket) -> None:
    """Notice a worker machine that vanished (no FIN/RST) in about half a minute, without
    limiting how long one computation may take."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 15), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
