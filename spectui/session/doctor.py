"""`spectui doctor`: what llama.cpp was built with, the GPUs this machine has, and what to do.

The same facts go into `spectui list --json` and `bench --json` (`system`), and the memory plan
reads its free GPU memory from them; `gpu_note` is the one line `spectui chat` and `bench` show at
start when the machine has a GPU the build cannot use.
"""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import dataclass

from spectui.engine.llama.build_info import (
    AMX_NOTE,
    NO_AMX_FLAGS,
    BuildInfo,
    current_flags,
    read_build_info,
    reinstall_command,
)
from spectui.safe_text import line as safe_line
from spectui.session.gpus import (
    BACKENDS,
    MachineGpu,
    Probe,
    advice,
    as_json,
    backend_for,
    find_gpus,
    unused_gpus,
)

GIB = 1024**3


@dataclass(frozen=True)
class Report:
    build: BuildInfo
    gpus: tuple[MachineGpu, ...]

    @property
    def advice(self) -> str | None:
        return advice(self.build, list(self.gpus))

    @property
    def unused(self) -> list[MachineGpu]:
        return unused_gpus(self.build, list(self.gpus))

    def runs_on(self) -> str:
        """Where layers go by default, in a few words: `CUDA0 (NVIDIA ...)`, or `CPU`."""
        if self.build.gpus:
            return ", ".join(f"{d.name} ({safe_line(d.description)})" for d in self.build.gpus)
        return "CPU"

    def header(self) -> str:
        """The panel's header line: what runs where, and a GPU left unused (the command is in the
        chat's note and `spectui doctor`)."""
        if not self.unused:
            return ""
        gpu = self.unused[0]
        return f"GPU unused: {safe_line(gpu.name)} (llama.cpp runs on the {self.runs_on()}); the fix: spectui doctor"

    def as_json(self) -> dict[str, object]:
        return {"llama_cpp": self.build.as_json(), "machine_gpus": [as_json(g) for g in self.gpus],
                "runs_on": self.runs_on(), "advice": self.advice}


def gather(probe: Probe | None = None) -> Report:
    return Report(read_build_info(), tuple(find_gpus(probe)))


@functools.cache
def this_machine() -> Report:
    """The report for this process (GPUs do not come and go while spectui runs; free memory is
    re-read by `gather`)."""
    return gather()


def gpu_note() -> str | None:
    """The line for chat/bench start: a GPU this build cannot use, and the command that fixes it."""
    return this_machine().advice


def _memory(free: int, total: int) -> str:
    return f"{free / GIB:.1f} of {total / GIB:.1f} GiB free" if total else "memory unknown"


def format_report(report: Report) -> str:
    build = report.build
    lines = [
        f"llama-cpp-python  {build.llama_cpp_python} (llama.cpp {safe_line(build.llama_cpp_commit) or '?'}, "
        f"ggml {safe_line(build.ggml_version) or '?'})",
        f"backends          {', '.join(build.backends) or 'none found'}",
        "devices",
    ]
    for d in build.devices:
        memory = _memory(d.free_bytes, d.total_bytes)
        lines.append(f"  {safe_line(d.name):<10} {d.kind:<5} {safe_line(d.description)}, {memory}")
    if not build.devices:
        lines.append("  (none: ggml's registry could not be read)")
    offload = f"yes: layers go to {report.runs_on()}" if build.gpu_offload else "no: everything runs on the CPU"
    rpc = "yes (spectui worker, --rpc)" if build.rpc else "no (rebuild with -DGGML_RPC=ON for --rpc)"
    lines += [
        f"CPU features      {' '.join(build.cpu_features) or '?'}",
        *([] if build.cpu_extra_buffers else [
            f"CPU weights       {AMX_NOTE}; to keep repacking, rebuild without AMX:",
            f"                  {reinstall_command([*current_flags(build), *NO_AMX_FLAGS])}"]),
        f"GPU offload       {offload}",
        f"RPC backend       {rpc}",
        "GPUs on this machine",
    ]
    for gpu in report.gpus:
        memory = f", {gpu.memory_bytes / GIB:.1f} GiB" if gpu.memory_bytes else ""
        driver = f", driver {safe_line(gpu.driver)}" if gpu.driver else ""
        used = "not used by this build" if gpu in report.unused else "used"
        lines.append(f"  {safe_line(gpu.name)}{memory}{driver} [{safe_line(gpu.found_by)}]: {used}")
    if not report.gpus:
        lines.append("  none found (nvidia-smi, /proc/driver/nvidia, /dev/dri render nodes, Apple Silicon)")
    if line := report.advice:
        lines += ["", line]
        if report.unused and "Rosetta" not in report.unused[0].name:
            lines.append(f"  (pip's wheel cache ignores CMAKE_ARGS: --no-cache-dir makes pip build again; "
                         f"needs {backend_for(report.unused[0]).needs})")
    elif report.gpus:
        lines += ["", "spectui puts every layer on the GPU by default (--n-gpu-layers to choose)."]
    return "\n".join(lines)


def doctor_command(args: argparse.Namespace) -> int:
    report = gather()
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(format_report(report))
        if not report.gpus:
            print("\nWith a GPU, README.md's install lines build llama.cpp for it "
                  f"({', '.join(b.label for b in BACKENDS.values())}).")
    return 0
