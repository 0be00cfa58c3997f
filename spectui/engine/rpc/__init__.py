"""The target on other machines, through llama.cpp's own RPC backend (ggml/include/ggml-rpc.h).

llama-cpp-python binds only `llama_supports_rpc`; the rest is called through ctypes, bound in
`spectui.engine.llama.backend`: `ggml_backend_rpc_add_server(endpoint)` connects and returns a
registry with one device per device the worker serves, and `ggml_backend_rpc_start_server(...)`
serves (blocking; `spectui worker`). The devices are never registered globally: they go into the *target's*
`llama_model_params.devices` only (src/llama.cpp:158-185), so the draft, loaded with the default
device list, stays on this machine.

Before llama.cpp touches a worker, `wire.probe` checks it (llama.cpp aborts the process on a
refused connection or another protocol version), and every worker is reached through an
in-process `Relay` that counts round trips and survives a worker that dies (see relay.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spectui.engine.llama import backend
from spectui.engine.llama.backend import (
    DEV_TYPE_ACCEL,
    DEV_TYPE_CPU,
    RpcCalls,
    local_gpu_devices,
    rpc_available,
    rpc_calls,
)
from spectui.engine.rpc.relay import Relay, Traffic
from spectui.engine.rpc.wire import Endpoint, WorkerInfo, parse_endpoints, probe
from spectui.errors import RpcError, WorkerLostError

if TYPE_CHECKING:
    from llama_cpp import llama_model_params

def require_rpc() -> RpcCalls:
    calls = rpc_calls()
    if calls is None or not rpc_available():
        from spectui.engine.llama.build_info import current_flags, read_build_info, reinstall_command

        command = reinstall_command(current_flags(read_build_info()))
        raise RpcError(
            f"this llama-cpp-python was built without llama.cpp's RPC backend; rebuild it with {command} "
            "(--no-cache-dir: pip's wheel cache ignores CMAKE_ARGS)"
        )
    return calls


@dataclass(frozen=True)
class RpcDevice:
    """One device on a worker, as llama.cpp names it, with the memory the worker reported."""

    name: str
    """llama.cpp's device name (RPC0, RPC1, ...), as in its log."""
    endpoint: Endpoint
    """The worker it lives on, as the user named it."""
    index: int
    """The device's number on that worker."""
    free_bytes: int
    total_bytes: int


class RpcCluster:
    """Connected workers whose devices the target is loaded onto; owned by that model."""

    def __init__(self, relays: list[Relay], devices: list[tuple[int, RpcDevice]],
                 tensor_split: Sequence[float] | None) -> None:
        self._relays = relays
        self._pointers = [pointer for pointer, _ in devices]
        self.devices = tuple(device for _, device in devices)
        self.tensor_split = list(tensor_split) if tensor_split else None
        self._keep_alive: list[object] = []

    def apply(self, params: llama_model_params) -> None:
        """Point a `llama_model_params` at the workers' devices (then this machine's GPUs, as
        llama.cpp's own --rpc does) and, if given, the tensor split over that list."""
        import llama_cpp

        pointers = [*self._pointers, *local_gpu_devices()]
        devices = (ctypes.c_void_p * (len(pointers) + 1))(*pointers, None)
        # a c_void_p field in llama_cpp.py (line 905), which its annotation calls an array
        params.devices = ctypes.addressof(devices)  # type: ignore[assignment]
        self._keep_alive.append(devices)
        if self.tensor_split:
            if len(self.tensor_split) > len(pointers):
                raise RpcError(
                    f"--tensor-split has {len(self.tensor_split)} values for {len(pointers)} devices "
                    f"({', '.join(d.name for d in self.devices)} and local GPUs); give one per device"
                )
            split = (ctypes.c_float * llama_cpp.llama_max_devices())(*self.tensor_split)
            params.tensor_split = split
            self._keep_alive.append(split)

    def layer_plan(self, n_layer: int) -> list[tuple[str, int]]:
        """(device name, repeating layers) as llama.cpp places a fully offloaded model: by
        --tensor-split, else by free memory as reported at connect time; local GPUs last."""
        functions = backend.ggml()
        names = [d.name for d in self.devices]
        weights = [float(d.free_bytes) for d in self.devices]
        for pointer in local_gpu_devices():  # none without ggml's library (functions None)
            assert functions is not None
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            functions.dev_memory(pointer, ctypes.byref(free), ctypes.byref(total))
            names.append(functions.dev_name(pointer).decode())
            weights.append(float(free.value))
        if self.tensor_split:
            weights = [*self.tensor_split, *[0.0] * (len(names) - len(self.tensor_split))]
        return list(zip(names, assign_layers(n_layer, weights), strict=True))

    def check(self) -> None:
        """Raise `WorkerLostError` once any worker stopped answering."""
        for relay in self._relays:
            if relay.lost is not None:
                raise WorkerLostError(relay.lost)

    def poll(self) -> None:
        """Between replies: notice a worker whose connection closed while nothing was asked of it
        (killed, restarted), then `check`. Call only while no decode runs."""
        for relay in self._relays:
            relay.poll()
        self.check()

    @property
    def lost(self) -> str | None:
        return next((relay.lost for relay in self._relays if relay.lost is not None), None)

    def traffic(self) -> Traffic:
        """Totals since connecting; subtract two snapshots for one reply."""
        total = Traffic()
        for relay in self._relays:
            total = total + relay.traffic()
        return total

    def placed_bytes(self) -> dict[str, int]:
        """Bytes held on each worker now (its share of weights, KV cache and compute buffers)."""
        return {str(relay.upstream): relay.placed_bytes() for relay in self._relays}

    def set_delay(self, seconds: float) -> None:
        """Add `seconds` to every answered command from now on (benchmarks, tests)."""
        for relay in self._relays:
            relay.delay = seconds

    def close(self) -> None:
        for relay in self._relays:
            relay.close()


def connect(
    endpoints: str | Sequence[Endpoint],
    *,
    tensor_split: Sequence[float] | None = None,
    delay: float = 0.0,
    timeout: float = 5.0,
) -> RpcCluster:
    """Check every worker, then hand llama.cpp a relay per worker; one line on any failure."""
    ggml = require_rpc()
    if isinstance(endpoints, str):
        endpoints = parse_endpoints(endpoints)
    infos = [probe(endpoint, timeout) for endpoint in endpoints]
    relays: list[Relay] = []
    devices: list[tuple[int, RpcDevice]] = []
    try:
        for info in infos:
            relay = Relay(info.endpoint, delay=delay)
            relays.append(relay)
            devices.extend(_register(ggml, relay, info))
    except Exception:
        for relay in relays:
            relay.close()
        raise
    return RpcCluster(relays, devices, tensor_split)


def _register(ggml: RpcCalls, relay: Relay, info: WorkerInfo) -> list[tuple[int, RpcDevice]]:
    reg = ggml.add_server(str(relay.address).encode())
    if not reg or relay.lost:
        raise RpcError(f"{relay.lost or f'worker {info.endpoint} lists no device'}; restart it and try again")
    found = []
    for i in range(ggml.reg_dev_count(reg)):
        pointer = ggml.reg_dev_get(reg, i)
        memory = info.devices[i] if i < len(info.devices) else None
        device = RpcDevice(ggml.dev_name(pointer).decode(), info.endpoint, i,
                           memory.free_bytes if memory else 0, memory.total_bytes if memory else 0)
        found.append((pointer, device))
    return found


def assign_layers(n_layer: int, weights: Sequence[float]) -> list[int]:
    """Repeating layers per device when every layer is offloaded, as llama.cpp splits them:
    cumulative proportions over n_layer + 1 slots, the last slot being the output layer
    (src/llama-model.cpp:1557-1600). `weights`: free memory or --tensor-split values."""
    total = sum(weights)
    bounds, running = [], 0.0
    for weight in weights:
        running += weight
        bounds.append(running / total)
    counts = [0] * len(weights)
    for layer in range(n_layer):
        position = layer / (n_layer + 1)
        counts[next((i for i, b in enumerate(bounds) if position < b), len(bounds) - 1)] += 1
    return counts


# ----- serving -----------------------------------------------------------------------------------


def worker_devices() -> list[tuple[int, str]]:
    """The devices a worker serves: every accelerator, else the CPU (tools/rpc/rpc-server.cpp:182-199)."""
    ggml = require_rpc()
    found = [ggml.dev_get(i) for i in range(ggml.dev_count())]
    chosen = [d for d in found if ggml.dev_type(d) not in (DEV_TYPE_CPU, DEV_TYPE_ACCEL)]
    chosen = chosen or [d for d in found if ggml.dev_type(d) == DEV_TYPE_CPU][:1]
    return [(d, f"{ggml.dev_name(d).decode()} ({ggml.dev_description(d).decode()})") for d in chosen]


def serve(host: str, port: int, n_threads: int, cache_dir: str | None) -> None:
    """Serve this machine's devices over llama.cpp's RPC protocol; blocks while serving, returns
    only when llama.cpp could not listen (ggml-rpc.cpp:2088-2153)."""
    ggml = require_rpc()
    pointers = [pointer for pointer, _ in worker_devices()]
    devices = (ctypes.c_void_p * len(pointers))(*pointers)
    ggml.start_server(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None,
                      n_threads, len(pointers), devices)
