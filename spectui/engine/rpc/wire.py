"""llama.cpp's RPC wire protocol, the part spectui needs to talk to a worker itself.

Every message the client sends is `| cmd: u8 | size: u64 | payload |`; commands that answer get
`| size: u64 | payload |` back, the others get nothing (ggml/src/ggml-rpc/ggml-rpc.cpp:307-340).
A connection opens with HELLO, whose answer carries the server's protocol version
(`negotiate_hello`, ggml-rpc.cpp:347-365). spectui speaks this much itself so that it can check
a worker *before* llama.cpp connects: llama.cpp aborts the whole process on a refused connection
or a version mismatch (GGML_ABORT in `rpc_dispatcher::start`, ggml-rpc.cpp:535-555).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from enum import IntEnum

from spectui.errors import RpcError

PROTOCOL_VERSION = (7, 0, 0)
"""RPC_PROTO_{MAJOR,MINOR,PATCH}_VERSION of the llama.cpp in llama-cpp-python 0.3.36
(ggml/include/ggml-rpc.h:7-9); no function exports it. A server is compatible when its major
equals ours and its minor is not newer (`negotiate_hello`, ggml-rpc.cpp:356)."""
CONN_CAPS_SIZE = 24
"""Transport capabilities in HELLO (RDMA queue pair numbers; zero = plain TCP), transport.h:11."""
DEFAULT_PORT = 50052


class Cmd(IntEnum):
    """`enum rpc_cmd`, ggml-rpc.cpp:61-81 (HELLO is fixed at 14 across versions)."""

    ALLOC_BUFFER = 0
    GET_ALIGNMENT = 1
    GET_MAX_SIZE = 2
    BUFFER_GET_BASE = 3
    FREE_BUFFER = 4
    BUFFER_CLEAR = 5
    SET_TENSOR = 6
    SET_TENSOR_HASH = 7
    GET_TENSOR = 8
    COPY_TENSOR = 9
    GRAPH_COMPUTE = 10
    GET_DEVICE_MEMORY = 11
    INIT_TENSOR = 12
    GET_ALLOC_SIZE = 13
    HELLO = 14
    DEVICE_COUNT = 15
    GRAPH_RECOMPUTE = 16
    MEMSET_TENSOR = 17


RESPONSE_SIZE: dict[Cmd, int | None] = {
    Cmd.HELLO: 4 + CONN_CAPS_SIZE,
    Cmd.DEVICE_COUNT: 4,
    Cmd.ALLOC_BUFFER: 16,
    Cmd.GET_ALLOC_SIZE: 8,
    Cmd.GET_ALIGNMENT: 8,
    Cmd.GET_MAX_SIZE: 8,
    Cmd.BUFFER_GET_BASE: 8,
    Cmd.SET_TENSOR_HASH: 1,
    Cmd.GET_TENSOR: None,
    Cmd.COPY_TENSOR: 1,
    Cmd.GET_DEVICE_MEMORY: 16,
}
"""Commands the server answers, and the answer's size (None: the size the request asks for).
The rest (SET_TENSOR, GRAPH_COMPUTE, GRAPH_RECOMPUTE, FREE_BUFFER, ...) are one-way: the client
does not wait for them (`rpc_serve_client`, ggml-rpc.cpp:1820-2085)."""


@dataclass(frozen=True)
class Endpoint:
    """One worker address, `HOST:PORT` as llama.cpp parses it (`parse_endpoint`, ggml-rpc.cpp:293)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class WorkerDevice:
    """One device a worker serves, with the memory it reports (GET_DEVICE_MEMORY)."""

    index: int
    """The device's number on its worker."""
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker said in answer to HELLO, DEVICE_COUNT and GET_DEVICE_MEMORY."""

    endpoint: Endpoint
    version: tuple[int, int, int]
    devices: tuple[WorkerDevice, ...]


def parse_endpoints(text: str) -> list[Endpoint]:
    """`HOST:PORT[,HOST:PORT...]` -> endpoints; one clear line for anything else."""
    endpoints = [parse_endpoint(part.strip()) for part in text.split(",") if part.strip()]
    if not endpoints:
        raise RpcError("--rpc needs HOST:PORT[,HOST:PORT...], e.g. --rpc 192.168.1.20:50052")
    if len(set(endpoints)) != len(endpoints):
        raise RpcError(f"--rpc names a worker twice ({text}); give each HOST:PORT once")
    return endpoints


def parse_endpoint(text: str) -> Endpoint:
    host, sep, port_text = text.rpartition(":")
    port = int(port_text) if port_text.isascii() and port_text.isdigit() else 0  # not `²`, which isdigit takes
    if not sep or not host or ":" in host or not 0 < port < 65536:
        raise RpcError(
            f"{text!r} is not a worker address: write HOST:PORT (IPv4 or a host name), "
            f"e.g. 192.168.1.20:{DEFAULT_PORT}"
        )
    return Endpoint(host, port)


def is_compatible(version: tuple[int, int, int]) -> bool:
    return version[0] == PROTOCOL_VERSION[0] and version[1] <= PROTOCOL_VERSION[1]


def version_text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


# ----- framing ---------------------------------------------------------------------------------


def request(cmd: Cmd, payload: bytes = b"") -> bytes:
    return struct.pack("<BQ", cmd, len(payload)) + payload


def response(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Exactly n bytes, or None when the peer closed the connection first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        chunk = sock.recv_into(view[got:], n - got)
        if chunk == 0:
            return None
        got += chunk
    return bytes(buf)


def hello_payload() -> bytes:
    """A HELLO request advertising no RDMA, so the connection stays plain TCP."""
    return bytes(CONN_CAPS_SIZE)


def fake_response(cmd: Cmd, payload: bytes) -> bytes:
    """A well-formed answer for a worker that is gone, so llama.cpp does not abort.

    The values are harmless to llama.cpp's client code (a non-zero alignment, a failed
    allocation, no device); the results computed with them are thrown away by the caller.
    """
    if cmd == Cmd.HELLO:
        body = bytes([*PROTOCOL_VERSION, 0]) + bytes(CONN_CAPS_SIZE)
    elif cmd == Cmd.GET_TENSOR:
        (size,) = struct.unpack_from("<Q", payload, len(payload) - 8)
        body = bytes(size)
    elif cmd == Cmd.GET_ALIGNMENT:
        body = struct.pack("<Q", 32)
    elif cmd == Cmd.GET_MAX_SIZE:
        body = struct.pack("<Q", 1 << 62)
    elif cmd == Cmd.BUFFER_GET_BASE:
        body = struct.pack("<Q", 4096)
    else:
        body = bytes(RESPONSE_SIZE[cmd] or 0)
    return response(body)


# ----- checking a worker before llama.cpp connects -----------------------------------------------


def probe(endpoint: Endpoint, timeout: float = 5.0) -> WorkerInfo:
    """Connect, HELLO, count devices and read their memory; one clear line on any failure.

    The worker serves one client at a time (`ggml_backend_rpc_start_server` accepts, serves until
    the client leaves, then accepts the next: ggml-rpc.cpp:2143-2153), so this connection is
    closed before llama.cpp opens its own.
    """
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except ConnectionRefusedError:
        raise RpcError(
            f"worker {endpoint} refused the connection: start `spectui worker --port {endpoint.port}` "
            "there (it listens on 127.0.0.1 only, unless given --host)"
        ) from None
    except socket.gaierror:
        raise RpcError(f"worker {endpoint}: unknown host {endpoint.host!r}; check the address") from None
    except TimeoutError:
        raise RpcError(
            f"worker {endpoint} did not answer within {timeout:g} s: check the address, "
            "the firewall, or your SSH tunnel"
        ) from None
    except OSError as error:
        raise RpcError(f"worker {endpoint} is unreachable ({error.strerror or error}); check the address") from None
    with sock:
        try:
            return _handshake(sock, endpoint)
        except TimeoutError:
            raise RpcError(
                f"worker {endpoint} accepted but did not answer within {timeout:g} s: it is busy "
                "with another client (a worker serves one at a time) or is not a llama.cpp RPC worker"
            ) from None
        except OSError as error:
            raise RpcError(f"worker {endpoint} dropped the connection ({error.strerror or error}); "
                           "check that it is a `spectui worker`") from None


def _handshake(sock: socket.socket, endpoint: Endpoint) -> WorkerInfo:
    mine = version_text(PROTOCOL_VERSION)
    sock.sendall(request(Cmd.HELLO, hello_payload()))
    body = _answer(sock, RESPONSE_SIZE[Cmd.HELLO] or 0)
    if body is None:
        raise RpcError(
            f"worker {endpoint} closed the connection at the handshake: it speaks another llama.cpp "
            f"RPC protocol than this spectui ({mine}) or is not an RPC worker; install the same "
            "spectui and llama-cpp-python version on both machines"
        )
    version = (body[0], body[1], body[2])
    if not is_compatible(version):
        raise RpcError(
            f"worker {endpoint} speaks llama.cpp RPC protocol {version_text(version)}, this spectui "
            f"speaks {mine}; install the same spectui and llama-cpp-python version on both machines"
        )
    sock.sendall(request(Cmd.DEVICE_COUNT))
    count_body = _answer(sock, 4)
    if count_body is None:
        raise RpcError(f"worker {endpoint} closed the connection while listing its devices; restart it")
    devices = []
    for index in range(struct.unpack("<I", count_body)[0]):
        sock.sendall(request(Cmd.GET_DEVICE_MEMORY, struct.pack("<I", index)))
        memory = _answer(sock, 16)
        if memory is None:
            raise RpcError(f"worker {endpoint} closed the connection while reporting memory; restart it")
        free, total = struct.unpack("<QQ", memory)
        devices.append(WorkerDevice(index, free, total))
    if not devices:
        raise RpcError(f"worker {endpoint} serves no device; restart it on a machine with a CPU or GPU backend")
    return WorkerInfo(endpoint, version, tuple(devices))


def _answer(sock: socket.socket, expected: int) -> bytes | None:
    """One framed answer of `expected` bytes; None if the peer closed or sent another size."""
    head = recv_exact(sock, 8)
    if head is None or struct.unpack("<Q", head)[0] != expected:
        return None
    return recv_exact(sock, expected)
