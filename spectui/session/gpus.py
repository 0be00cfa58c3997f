"""The GPUs this machine has, whether or not llama.cpp was built to use them, and what to do.

Found without llama.cpp, from what the operating system shows:

- NVIDIA: `nvidia-smi` (name, memory, driver), else the driver's /proc/driver/nvidia/gpus/*/
  information and /proc/driver/nvidia/version;
- AMD and Intel (and NVIDIA without its tools): the render nodes /dev/dri/renderD*, named by the
  PCI vendor id in /sys/class/drm/renderD*/device/vendor (AMD's VRAM in mem_info_vram_total);
- Apple Silicon: macOS on arm64, or an x86_64 Python translated by Rosetta
  (`sysctl.proc_translated`), which no rebuild can help.

`Probe` says where to look, so tests point it at a fixture tree, a PATH holding a fake
`nvidia-smi`, and another platform. `advice` compares the GPUs with what the build can drive and
returns the one line to show at `spectui chat` / `bench` start, with the exact reinstall command.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spectui import safe_text
from spectui.engine.llama.build_info import BACKEND_FLAGS, BuildInfo, reinstall_command

PCI_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
MIB = 1024 * 1024


@dataclass(frozen=True)
class MachineGpu:
    vendor: str
    """nvidia, amd, intel or apple."""
    name: str
    found_by: str
    """Where it was seen: nvidia-smi, /proc/driver/nvidia, /dev/dri/renderD128, Apple Silicon."""
    memory_bytes: int | None = None
    driver: str | None = None


@dataclass(frozen=True)
class Probe:
    """Where to look for GPUs (the real machine by default)."""

    root: Path = Path("/")
    path: str | None = None
    """The PATH to find nvidia-smi / sysctl on (default: this process's)."""
    system: str = field(default_factory=platform.system)
    machine: str = field(default_factory=platform.machine)

    def file(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def which(self, program: str) -> str | None:
        return shutil.which(program, path=self.path if self.path is not None else os.environ.get("PATH"))


@dataclass(frozen=True)
class Backend:
    """A llama.cpp GPU backend a user can build llama-cpp-python with."""

    label: str
    registry: str
    """ggml's registry name for it (what `BuildInfo.backends` lists)."""
    needs: str
    """What to install before building (llama.cpp's docs/build.md)."""
    env: str = ""
    extra_flags: tuple[str, ...] = ()

    def command(self, version: str | None = None) -> str:
        return reinstall_command([BACKEND_FLAGS[self.registry], *self.extra_flags], env=self.env, version=version)


BACKENDS = {
    "cuda": Backend("CUDA", "CUDA", "the CUDA toolkit (nvcc) and an NVIDIA driver"),
    "metal": Backend("Metal", "MTL", "Xcode's command-line tools and an arm64 Python",
                     extra_flags=("-DCMAKE_OSX_ARCHITECTURES=arm64", "-DCMAKE_APPLE_SILICON_PROCESSOR=arm64")),
    "rocm": Backend("ROCm/HIP", "ROCm", "ROCm (hipconfig on PATH)",
                    env='HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)"'),
    "vulkan": Backend("Vulkan", "Vulkan", "the Vulkan SDK, or libvulkan-dev glslc spirv-headers; "
                      "`vulkaninfo` must list the GPU"),
}
FOR_VENDOR = {"nvidia": "cuda", "apple": "metal", "amd": "rocm", "intel": "vulkan"}
USABLE_BY = {"nvidia": {"CUDA", "Vulkan"}, "amd": {"ROCm", "Vulkan"}, "intel": {"Vulkan", "SYCL"},
             "apple": {"MTL", "Vulkan"}}
"""Registries whose devices can be a GPU of that vendor."""


def find_gpus(probe: Probe | None = None) -> list[MachineGpu]:
    """Every GPU the machine shows, NVIDIA's tools first, then render nodes, then Apple Silicon."""
    probe = probe or Probe()
    found = _nvidia_smi(probe) or _nvidia_proc(probe)
    seen_nvidia = bool(found)
    for gpu in _render_nodes(probe):
        if not (seen_nvidia and gpu.vendor == "nvidia"):
            found.append(gpu)
    if apple := _apple_silicon(probe):
        found.append(apple)
    return found


def _nvidia_smi(probe: Probe) -> list[MachineGpu]:
    program = probe.which("nvidia-smi")
    if program is None:
        return []
    try:
        raw = subprocess.run([program, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
                             capture_output=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    out = raw.decode("utf-8", errors="replace")  # another program's bytes: not always UTF-8
    gpus = []
    for line in out.splitlines():
        parts = [safe_text.line(part.strip()) for part in line.split(",")]
        if len(parts) >= 3 and parts[0]:
            gpus.append(MachineGpu("nvidia", parts[0], "nvidia-smi", mebibytes(parts[1]), parts[2] or None))
    return gpus


def whole_number(figure: str) -> int | None:
    """`16384` as an int; None for anything but ASCII digits (`[N/A]`, or `²`, which
    `str.isdigit` accepts and `int` refuses)."""
    return int(figure) if figure.isascii() and figure.isdigit() else None


def mebibytes(figure: str) -> int | None:
    """nvidia-smi's memory figure (MiB) in bytes, or None."""
    number = whole_number(figure)
    return number * MIB if number is not None else None


def _nvidia_proc(probe: Probe) -> list[MachineGpu]:
    """The NVIDIA kernel driver's own files (present without nvidia-smi, e.g. in a container)."""
    version = _read(probe.file("/proc/driver/nvidia/version"))
    driver = None
    if version:
        words = version.split("Kernel Module", 1)[-1].split()
        driver = words[0] if words else None
    gpus = []
    for info in sorted(probe.file("/proc/driver/nvidia/gpus").glob("*/information")):
        model = next((line.split(":", 1)[1].strip() for line in (_read(info) or "").splitlines()
                      if line.startswith("Model:")), "NVIDIA GPU")
        gpus.append(MachineGpu("nvidia", model, "/proc/driver/nvidia", None, driver))
    if not gpus and version:
        gpus.append(MachineGpu("nvidia", "NVIDIA GPU", "/proc/driver/nvidia", None, driver))
    return gpus


def _render_nodes(probe: Probe) -> list[MachineGpu]:
    gpus = []
    for node in sorted(probe.file("/dev/dri").glob("renderD*")):
        device = probe.file(f"/sys/class/drm/{node.name}/device")
        vendor = PCI_VENDORS.get((_read(device / "vendor") or "").strip().lower())
        if vendor is None:  # virtio, VMware, QEMU's display: nothing llama.cpp computes on
            continue
        product = (_read(device / "product_name") or "").strip()
        device_id = (_read(device / "device") or "").strip()
        name = product or f"{vendor.upper() if vendor == 'amd' else vendor.capitalize()} GPU {device_id}".strip()
        vram = (_read(device / "mem_info_vram_total") or "").strip()
        gpus.append(MachineGpu(vendor, name, f"/dev/dri/{node.name}", whole_number(vram)))
    return gpus


def _apple_silicon(probe: Probe) -> MachineGpu | None:
    if probe.system != "Darwin":
        return None
    if probe.machine == "arm64":
        return MachineGpu("apple", "Apple Silicon GPU", "Apple Silicon")
    if _rosetta(probe):
        return MachineGpu("apple", "Apple Silicon GPU (this Python is x86_64, under Rosetta)", "Apple Silicon")
    return None


def _rosetta(probe: Probe) -> bool:
    program = probe.which("sysctl")
    if program is None:
        return False
    try:
        out = subprocess.run([program, "-n", "sysctl.proc_translated"], capture_output=True, text=True,
                             timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return out.strip() == "1"


def _read(path: Path) -> str | None:
    """A small system file's text, printable (another program wrote it), or None."""
    try:
        return safe_text.block(path.read_text(errors="replace")[:4096])
    except OSError:
        return None


def unused_gpus(build: BuildInfo, gpus: list[MachineGpu]) -> list[MachineGpu]:
    """The machine's GPUs no backend of this build can drive (all of them for a CPU build)."""
    usable = {d.backend for d in build.gpus}
    return [gpu for gpu in gpus if not (USABLE_BY.get(gpu.vendor, set()) & usable)]


def backend_for(gpu: MachineGpu) -> Backend:
    return BACKENDS[FOR_VENDOR[gpu.vendor]]


def advice(build: BuildInfo, gpus: list[MachineGpu]) -> str | None:
    """One line when the machine has a GPU this build cannot use: why, and the command that fixes it."""
    unused = unused_gpus(build, gpus)
    if not unused:
        return None
    gpu = unused[0]
    if "Rosetta" in gpu.name:
        return ("this Python runs as x86_64 under Rosetta, so llama.cpp cannot use the Apple GPU (and runs "
                "~10x slower): install an arm64 Python, then spectui in it (README: Metal)")
    backend = backend_for(gpu)
    if build.gpu_backends and not build.gpus:
        built = ", ".join(build.gpu_backends)
        return (f"llama.cpp was built with {built} but finds no GPU it can use; {gpu.name} runs nothing: "
                f"check its driver, or rebuild for {backend.label} (needs {backend.needs}): "
                f"{backend.command(build.llama_cpp_python)}")
    what = "for the CPU only" if not build.gpu_backends else f"with {', '.join(build.gpu_backends)}"
    return (f"{gpu.name} is not used: llama-cpp-python was built {what}; rebuild it for {backend.label} "
            f"(needs {backend.needs}): {backend.command(build.llama_cpp_python)}")


def as_json(gpu: MachineGpu) -> dict[str, object]:
    return asdict(gpu)
