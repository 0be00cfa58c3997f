"""llama.cpp's backend, once: its initialisation, and ggml's registry and device functions.

llama-cpp-python binds `llama_backend_init`, `llama_supports_rpc` and the model/context calls;
ggml's own registry and device functions (ggml/include/ggml-backend.h:181-243) and the RPC
backend's (ggml/include/ggml-rpc.h) it does not, so they are bound here through ctypes, each
signature written once: `Ggml` (libggml-base, libggml: registries, their devices, the CPU
backend's features, `ggml_version` / `ggml_commit`, ggml.h:739-740) and `RpcCalls` (libggml-rpc:
connect to a worker, serve as one). `build_info` reads the build from them, `rpc` connects
workers with them, `model` loads onto the devices they list. Nothing here imports another
spectui module but the log hook, so every part of the engine may use it.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _ctypes import CFuncPtr, _CDataType

DEV_TYPE_CPU, DEV_TYPE_GPU, DEV_TYPE_IGPU, DEV_TYPE_ACCEL = 0, 1, 2, 3  # ggml_backend_dev_type, ggml-backend.h:134-145

_backend_ready = False


def init_backend() -> None:
    """Install the log hook and initialise llama.cpp's backends, once per process."""
    global _backend_ready
    if not _backend_ready:
        import llama_cpp

        from spectui.engine.llama import llama_log

        llama_log.install()
        llama_cpp.llama_backend_init()
        _backend_ready = True


def bind(fn: CFuncPtr, restype: type[_CDataType] | None, argtypes: list[type[_CDataType]]) -> CFuncPtr:
    """A C function with its signature set (ctypes otherwise guesses int for everything)."""
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


def load_libraries(*names: str) -> list[ctypes.CDLL] | None:
    """Libraries beside llama-cpp-python's libllama; None when one is not there."""
    import llama_cpp
    from llama_cpp._ctypes_extensions import load_shared_library

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    try:
        return [load_shared_library(name, lib_dir) for name in names]
    except (OSError, RuntimeError):
        return None


class Ggml:
    """ggml's registry and device functions (libggml-base, libggml), with their C signatures."""

    def __init__(self, base: ctypes.CDLL, core: ctypes.CDLL) -> None:
        p, s, c = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        self.version = bind(base.ggml_version, c, [])
        self.commit = bind(base.ggml_commit, c, [])
        self.reg_name = bind(base.ggml_backend_reg_name, c, [p])
        self.reg_dev_count = bind(base.ggml_backend_reg_dev_count, s, [p])
        self.reg_dev_get = bind(base.ggml_backend_reg_dev_get, p, [p, s])
        self.reg_proc = bind(base.ggml_backend_reg_get_proc_address, p, [p, c])
        self.dev_name = bind(base.ggml_backend_dev_name, c, [p])
        self.dev_description = bind(base.ggml_backend_dev_description, c, [p])
        self.dev_type = bind(base.ggml_backend_dev_type, ctypes.c_int, [p])
        self.dev_memory = bind(base.ggml_backend_dev_memory, None, [p, ctypes.POINTER(s), ctypes.POINTER(s)])
        self.reg_count = bind(core.ggml_backend_reg_count, s, [])
        self.reg_get = bind(core.ggml_backend_reg_get, p, [s])
        self.dev_count = bind(core.ggml_backend_dev_count, s, [])
        self.dev_get = bind(core.ggml_backend_dev_get, p, [s])


class RpcCalls(Ggml):
    """The device functions and ggml-rpc.h's, with their C signatures."""

    def __init__(self, rpc: ctypes.CDLL, base: ctypes.CDLL, core: ctypes.CDLL) -> None:
        super().__init__(base, core)
        p, s, c = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        self.add_server = bind(rpc.ggml_backend_rpc_add_server, p, [c])
        self.start_server = bind(rpc.ggml_backend_rpc_start_server, None, [c, c, s, s, ctypes.POINTER(p)])


@functools.cache
def ggml() -> Ggml | None:
    """ggml's functions; None without its libraries, or an older ggml lacking one of them."""
    libs = load_libraries("ggml-base", "ggml")
    try:
        return Ggml(*libs) if libs else None
    except AttributeError:
        return None


@functools.cache
def rpc_calls() -> RpcCalls | None:
    """The RPC backend's functions; None in a build without it."""
    libs = load_libraries("ggml-rpc", "ggml-base", "ggml")
    try:
        return RpcCalls(*libs) if libs else None
    except AttributeError:  # a libggml-rpc without the functions spectui calls
        return None


def rpc_available() -> bool:
    """True when the installed llama-cpp-python was built with llama.cpp's RPC backend."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_rpc()) and rpc_calls() is not None


def local_gpu_devices() -> list[int]:
    """This machine's GPUs as llama.cpp would pick them by default (src/llama.cpp:222-285).

    Unlike `llama_supports_gpu_offload`, which is also true for a CPU-only build with RPC
    (src/llama.cpp:102-109), this lists real local devices only."""
    found_ggml = ggml()
    if found_ggml is None:
        return []
    found = [found_ggml.dev_get(i) for i in range(found_ggml.dev_count())]
    gpus = [d for d in found if found_ggml.dev_type(d) == DEV_TYPE_GPU]
    return gpus or [d for d in found if found_ggml.dev_type(d) == DEV_TYPE_IGPU]


def gpu_offload_available() -> bool:
    """True when llama.cpp has a GPU on this machine. Not `llama_supports_gpu_offload`: that is
    also true for a CPU-only build with the RPC backend (src/llama.cpp:102-109)."""
    init_backend()
    return bool(local_gpu_devices())
