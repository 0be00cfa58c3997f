"""What the installed llama.cpp was built with, asked of ggml's own registry (no guessing).

llama-cpp-python binds `llama_print_system_info`, `llama_supports_gpu_offload` and
`llama_supports_rpc`; the rest is read through ggml's functions as `spectui.engine.llama.backend`
binds them (ggml/include/ggml-backend.h:181-243):
`ggml_backend_reg_count/_get/_name` (one registry per backend compiled in: CPU, CUDA, ROCm, MTL
for Metal, Vulkan, SYCL, RPC, ...), their devices (name, description, type, free/total memory),
the CPU backend's `ggml_backend_get_features` (the instruction sets its kernels use,
ggml-cpu.cpp:541), and `ggml_version` / `ggml_commit` (ggml.h:739-740).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import asdict, dataclass

from spectui.engine.llama import backend
from spectui.engine.llama.backend import Ggml

DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}  # enum ggml_backend_dev_type
NOT_GPU_BACKENDS = frozenset({"CPU", "RPC", "BLAS"})
"""Registries that never hold a local GPU."""


class _Feature(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


@dataclass(frozen=True)
class Device:
    """One device llama.cpp can place layers on, as ggml's registry lists it."""

    name: str
    """ggml's name: CPU, CUDA0, MTL0, Vulkan0, ROCm0, RPC0, ..."""
    description: str
    kind: str
    """cpu, gpu, igpu (an integrated GPU) or accel."""
    backend: str
    """The registry it belongs to (CUDA, MTL, Vulkan, ROCm, CPU, ...)."""
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("gpu", "igpu") and self.backend not in NOT_GPU_BACKENDS


@dataclass(frozen=True)
class BuildInfo:
    """The llama.cpp that spectui drives, as built and as it sees this machine."""

    llama_cpp_python: str
    ggml_version: str
    llama_cpp_commit: str
    """The llama.cpp commit ggml was built from (`ggml_commit`)."""
    backends: tuple[str, ...]
    devices: tuple[Device, ...]
    cpu_features: tuple[str, ...]
    """What the CPU backend's kernels use (AVX2, AVX512, NEON, ...)."""
    rpc: bool
    """Built with llama.cpp's RPC backend (a target spread over machines, `spectui worker`)."""
    system_info: str
    """`llama_print_system_info`, verbatim."""

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        """Backends compiled in that drive a local GPU, found or not (CUDA, MTL, Vulkan, ...)."""
        return tuple(b for b in self.backends if b not in NOT_GPU_BACKENDS)

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.is_gpu)

    @property
    def gpu_offload(self) -> bool:
        """Layers can go to a GPU of this machine. Not `llama_supports_gpu_offload`: that is also
        true for a CPU-only build with RPC (src/llama.cpp:102-109)."""
        return bool(self.gpus)

    @property
    def cpu_extra_buffers(self) -> bool:
        """Whether spectui lets llama.cpp put weights in the CPU backend's extra buffer types
        (AMX, repacked layouts): not in a build with AMX (`cpu_extra_buffers_usable`)."""
        return AMX_FEATURE not in self.cpu_features

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["gpu_backends"] = list(self.gpu_backends)
        data["gpu_offload"] = self.gpu_offload
        data["cpu_extra_buffers"] = self.cpu_extra_buffers
        return data


AMX_FEATURE = "AMX_INT8"
AMX_NOTE = ("built with AMX, which this llama.cpp's kernels crash on (SIGILL); weights load without "
            "the CPU's extra buffer types (no AMX, no repacking: Q4_0 reads prompts ~1.8x slower)")
NO_AMX_FLAGS = ("-DCMAKE_C_FLAGS=-mno-amx-int8", "-DCMAKE_CXX_FLAGS=-mno-amx-int8")
"""A build without AMX on such a CPU (`-march=native` defines no __AMX_INT8__): repacking stays."""


@functools.cache
def cpu_extra_buffers_usable() -> bool:
    """Whether model loads may use the CPU backend's extra buffer types (`use_extra_bufts`).

    Not in a build with AMX: `-march=native` on a CPU with AMX (Xeon Sapphire Rapids and later)
    compiles ggml's AMX matmul in, and the AMX buffer type takes every Q4_0/Q4_1/Q8_0/K-quant
    weight (ggml-cpu.cpp:41-50). Its tile config is a stack value the compiler may drop
    (ggml_tile_config_init, amx/mmq.cpp:204-225; upstream llama.cpp PR #26954), so the first tile
    instruction faults: SIGILL on the first decode of the chat demo's Q8_0 draft, seen on this
    machine kind's Intel hosts (`tilezero %tmm4` in ggml_backend_amx_mul_mat). The switch is all
    or nothing (llama-model.cpp:1110), so such builds also lose the repacked layouts: slower
    quantized weights on the CPU, against a crash."""
    ggml = backend.ggml()
    if ggml is None:
        return True
    backend.init_backend()
    return AMX_FEATURE not in _cpu_backend_features(ggml)


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""


def _cpu_features(ggml: Ggml, reg: int) -> tuple[str, ...]:
    """`ggml_backend_get_features` of a registry: name=value pairs up to a NULL name."""
    address = ggml.reg_proc(reg, b"ggml_backend_get_features")
    if not address:
        return ()
    get = ctypes.CFUNCTYPE(ctypes.POINTER(_Feature), ctypes.c_void_p)(address)
    features = get(reg)
    found, i = [], 0
    while features and features[i].name:
        name, value = _text(features[i].name), _text(features[i].value)
        if value not in ("", "0"):
            found.append(name if value == "1" else f"{name}={value}")
        i += 1
    return tuple(found)


def _cpu_backend_features(ggml: Ggml) -> tuple[str, ...]:
    """The CPU registry's features: read alone, as a load must, without asking any other device
    (an RPC worker's memory is a network call)."""
    for r in range(ggml.reg_count()):
        reg = ggml.reg_get(r)
        if _text(ggml.reg_name(reg)) == "CPU":
            return _cpu_features(ggml, reg)
    return ()


def read_build_info() -> BuildInfo:
    """Ask the installed llama.cpp what it was built with and which devices it finds.

    Initialises llama.cpp's backends (as loading a model would); the devices' free memory is read
    now, each call."""
    import llama_cpp

    backend.init_backend()
    ggml = backend.ggml()
    backends: list[str] = []
    devices: list[Device] = []
    features: tuple[str, ...] = ()
    version = commit = ""
    if ggml is not None:
        version, commit = _text(ggml.version()), _text(ggml.commit())
        features = _cpu_backend_features(ggml)
        for r in range(ggml.reg_count()):
            reg = ggml.reg_get(r)
            name = _text(ggml.reg_name(reg))
            backends.append(name)
            for d in range(ggml.reg_dev_count(reg)):
                dev = ggml.reg_dev_get(reg, d)
                free, total = ctypes.c_size_t(), ctypes.c_size_t()
                ggml.dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
                devices.append(Device(_text(ggml.dev_name(dev)), _text(ggml.dev_description(dev)),
                                      DEVICE_KINDS.get(ggml.dev_type(dev), "unknown"), name,
                                      free.value, total.value))
    return BuildInfo(
        llama_cpp_python=llama_cpp.__version__, ggml_version=version, llama_cpp_commit=commit,
        backends=tuple(backends), devices=tuple(devices), cpu_features=features, rpc=backend.rpc_available(),
        system_info=_text(llama_cpp.llama_print_system_info()).strip(),
    )


BACKEND_FLAGS = {
    "CUDA": "-DGGML_CUDA=on", "ROCm": "-DGGML_HIP=on", "MTL": "-DGGML_METAL=on", "Vulkan": "-DGGML_VULKAN=on",
    "SYCL": "-DGGML_SYCL=on", "MUSA": "-DGGML_MUSA=on", "OpenCL": "-DGGML_OPENCL=on",
}
"""The CMake flag that compiles each GPU backend in (llama.cpp's docs/build.md; llama-cpp-python's
README, "Supported Backends")."""
SPECTUI_FLAGS = ("-DGGML_RPC=ON", "-DLLAVA_BUILD=OFF")
"""What README's install commands always pass: the RPC backend, and no multimodal library."""


def reinstall_command(flags: tuple[str, ...] | list[str] = (), env: str = "", pip: str | None = None,
                      version: str | None = None) -> str:
    """The command that rebuilds llama-cpp-python with `flags` (plus spectui's own) for this Python.

    `--no-cache-dir`: pip's wheel cache ignores CMAKE_ARGS and would reinstall the old build;
    `--force-reinstall --no-deps`: rebuild this one package, leave its dependencies alone."""
    import shlex
    import sys

    if version is None:
        import llama_cpp

        version = llama_cpp.__version__
    pip = pip or f"{shlex.quote(sys.executable)} -m pip"
    cmake_args = " ".join(dict.fromkeys([*flags, *SPECTUI_FLAGS]))
    prefix = f"{env} " if env else ""
    return (f'{prefix}CMAKE_ARGS="{cmake_args}" {pip} install --no-cache-dir --force-reinstall --no-deps '
            f"llama-cpp-python=={version}")


def current_flags(info: BuildInfo) -> list[str]:
    """The flags of the GPU backends this build has (a rebuild for RPC should keep them)."""
    return [BACKEND_FLAGS[b] for b in info.gpu_backends if b in BACKEND_FLAGS]
