"""`spectui doctor` and the GPU line: what llama.cpp was built with, the GPUs the machine has.

llama.cpp's side is this machine's real build (CPU + RPC here), read through ggml's registry.
The GPUs are faked where the detection looks (issue #27): a fixture tree for /proc and /sys and
/dev/dri, a PATH holding a fake `nvidia-smi` or `sysctl`, another platform. A GPU the build
cannot use must be named at `bench` start and in the chat (note and panel header), with the
command that rebuilds llama-cpp-python for it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import llama_cpp
import pytest
import tiny_gguf
from textual.widgets import Static
from ui_harness import SIZE, RecordingApp, options, ready, run_async, shown

from spectui.cli import main
from spectui.engine import rpc
from spectui.engine.llama.build_info import AMX_NOTE, BuildInfo, Device, cpu_extra_buffers_usable, read_build_info
from spectui.session import doctor
from spectui.session.gpus import Probe, advice, find_gpus
from spectui.ui.chat_view import NoteMessage

PIP = "--no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36"
RTX = "NVIDIA GeForce RTX 4090, 24564, 550.54.14"


def fake_program(directory: Path, name: str, output: str, code: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / name
    program.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {code}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return directory


def linux(root: Path, path: Path | None = None) -> Probe:
    return Probe(root=root, path=str(path) if path else "", system="Linux", machine="x86_64")


def render_node(root: Path, node: str, vendor: str, **files: str) -> None:
    (root / "dev/dri").mkdir(parents=True, exist_ok=True)
    (root / "dev/dri" / node).touch()
    device = root / "sys/class/drm" / node / "device"
    device.mkdir(parents=True, exist_ok=True)
    (device / "vendor").write_text(vendor + "\n")
    for name, text in files.items():
        (device / name).write_text(text + "\n")


def cpu_build() -> BuildInfo:
    return read_build_info()  # this machine's: CPU (and RPC), no GPU backend


def gpu_build(backend: str, devices: int = 1) -> BuildInfo:
    gpus = tuple(Device(f"{backend}{i}", "a GPU", "gpu", backend, 8 << 30, 16 << 30) for i in range(devices))
    cpu = Device("CPU", "a CPU", "cpu", "CPU", 8 << 30, 16 << 30)
    return BuildInfo("0.3.36", "0.25.3", "abc", (backend, "CPU"), (*gpus, cpu), ("AVX2",), False, "")


def test_nvidia_smi_names_the_card_and_a_cpu_build_is_told_the_cuda_rebuild(tmp_path: Path) -> None:
    gpus = find_gpus(linux(tmp_path / "root", fake_program(tmp_path / "bin", "nvidia-smi", RTX)))
    assert [(g.vendor, g.name, g.memory_bytes, g.driver) for g in gpus] == [
        ("nvidia", "NVIDIA GeForce RTX 4090", 24564 * 1024 * 1024, "550.54.14")]
    line = advice(cpu_build(), gpus)
    assert line is not None and line.startswith("NVIDIA GeForce RTX 4090 is not used: llama-cpp-python was built")
    assert 'CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=ON -DLLAVA_BUILD=OFF" ' in line and line.endswith(PIP)
    assert "\n" not in line


def test_without_nvidia_smi_the_driver_files_still_show_the_card(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "proc/driver/nvidia/gpus/0000:01:00.0").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n")
    (root / "proc/driver/nvidia/gpus/0000:01:00.0/information").write_text("Model: \t\t NVIDIA L4\nIRQ: 42\n")
    render_node(root, "renderD128", "0x10de")  # the same card's render node is not a second GPU
    failing = fake_program(tmp_path / "bin", "nvidia-smi", "NVIDIA-SMI has failed", code=9)
    gpus = find_gpus(linux(root, failing))
    assert [(g.name, g.driver, g.found_by) for g in gpus] == [("NVIDIA L4", "550.54.14", "/proc/driver/nvidia")]


def test_render_nodes_name_amd_and_intel_and_skip_virtual_displays(tmp_path: Path) -> None:
    root = tmp_path / "root"
    render_node(root, "renderD128", "0x1002", product_name="AMD Radeon RX 7900 XTX",
                mem_info_vram_total=str(24 << 30))
    render_node(root, "renderD129", "0x8086", device="0x56a0")
    render_node(root, "renderD130", "0x1af4")  # virtio-gpu: nothing to compute on
    gpus = find_gpus(linux(root))
    assert [(g.vendor, g.name, g.memory_bytes) for g in gpus] == [
        ("amd", "AMD Radeon RX 7900 XTX", 24 << 30), ("intel", "Intel GPU 0x56a0", None)]
    amd = advice(cpu_build(), gpus)
    assert amd is not None and "rebuild it for ROCm/HIP" in amd
    assert 'HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)" CMAKE_ARGS="-DGGML_HIP=on' in amd
    intel = advice(cpu_build(), gpus[1:])
    assert intel is not None and 'CMAKE_ARGS="-DGGML_VULKAN=on -DGGML_RPC=ON -DLLAVA_BUILD=OFF"' in intel


def test_apple_silicon_gets_metal_and_a_rosetta_python_is_told_to_change_python(tmp_path: Path) -> None:
    arm = find_gpus(Probe(root=tmp_path, path="", system="Darwin", machine="arm64"))
    assert [g.vendor for g in arm] == ["apple"]
    metal = advice(cpu_build(), arm)
    assert metal is not None and "-DGGML_METAL=on -DCMAKE_OSX_ARCHITECTURES=arm64" in metal
    rosetta_bin = fake_program(tmp_path / "bin", "sysctl", "1")
    translated = find_gpus(Probe(root=tmp_path, path=str(rosetta_bin), system="Darwin", machine="x86_64"))
    line = advice(cpu_build(), translated)
    assert line is not None and "Rosetta" in line and "arm64 Python" in line
    intel_mac = fake_program(tmp_path / "bin2", "sysctl", "0")
    assert find_gpus(Probe(root=tmp_path, path=str(intel_mac), system="Darwin", machine="x86_64")) == []


def test_a_build_that_drives_the_gpu_says_nothing_and_one_that_finds_none_says_why(tmp_path: Path) -> None:
    nvidia = find_gpus(linux(tmp_path / "root", fake_program(tmp_path / "bin", "nvidia-smi", RTX)))
    assert advice(gpu_build("CUDA"), nvidia) is None
    assert advice(gpu_build("Vulkan"), nvidia) is None  # Vulkan drives an NVIDIA card too
    assert advice(cpu_build(), []) is None  # no GPU: nothing to say
    line = advice(gpu_build("CUDA", devices=0), nvidia)
    assert line is not None and "was built with CUDA but finds no GPU" in line and "check its driver" in line
    amd = advice(gpu_build("CUDA"), [*nvidia, *find_gpus(linux_with_amd(tmp_path))])
    assert amd is not None and amd.startswith("AMD") and "ROCm/HIP" in amd


def test_a_build_with_amx_loads_weights_without_the_extra_buffers_and_doctor_says_why() -> None:
    """This llama.cpp's AMX kernels fault (SIGILL on the chat demo's Q8_0 draft on this machine
    kind's Intel hosts): a build with AMX must load weights without the CPU's extra buffer types."""
    amx = replace(gpu_build("CUDA"), cpu_features=("AVX512", "AMX_INT8"))
    plain = gpu_build("CUDA")
    assert not amx.cpu_extra_buffers and plain.cpu_extra_buffers
    report = doctor.format_report(doctor.Report(amx, ()))
    assert AMX_NOTE in report
    assert "-DCMAKE_C_FLAGS=-mno-amx-int8" in report and "--force-reinstall" in report  # how to keep repacking
    assert "CPU weights" not in doctor.format_report(doctor.Report(plain, ()))
    assert json.loads(json.dumps(amx.as_json()))["cpu_extra_buffers"] is False
    # what the loader does is what doctor reports for this machine's own build
    assert cpu_extra_buffers_usable() == ("AMX_INT8" not in read_build_info().cpu_features)


def linux_with_amd(tmp_path: Path) -> Probe:
    root = tmp_path / "amd-root"
    render_node(root, "renderD128", "0x1002", product_name="AMD Radeon PRO W7900")
    return linux(root)


def test_doctor_prints_this_machines_build(capsys) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    build = read_build_info()
    assert f"llama-cpp-python  {llama_cpp.__version__}" in out
    assert "CPU" in build.backends and "CPU" in out.split("backends")[1].splitlines()[0]
    assert build.cpu_features and " ".join(build.cpu_features) in out
    assert ("RPC backend       yes" in out) == rpc.rpc_available()
    assert "GPU offload       no" in out or build.gpu_offload
    assert main(["doctor", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["llama_cpp"]["llama_cpp_python"] == llama_cpp.__version__
    assert facts["llama_cpp"]["devices"][0]["total_bytes"] > 0
    assert {d["name"] for d in facts["llama_cpp"]["devices"]} >= {"CPU"}


def test_doctor_names_the_unused_gpu_and_the_command(tmp_path: Path, monkeypatch, capsys) -> None:
    bin_dir = fake_program(tmp_path / "bin", "nvidia-smi", RTX)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA GeForce RTX 4090, 24.0 GiB, driver 550.54.14 [nvidia-smi]: not used by this build" in out
    assert "-DGGML_CUDA=on" in out and "--no-cache-dir makes pip build again" in out


@pytest.fixture
def machine_with_rtx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> doctor.Report:
    report = doctor.gather(linux(tmp_path / "root", fake_program(tmp_path / "bin", "nvidia-smi", RTX)))
    monkeypatch.setattr(doctor, "this_machine", lambda: report)
    return report


def test_bench_starts_with_the_gpu_line_and_its_json_carries_the_facts(
        machine_with_rtx: doctor.Report, tiny_pair: tiny_gguf.TinyPair, capsys) -> None:
    args = ["bench", "--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft), "-k", "2",
            "--max-tokens", "8", "--threads", "1", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    first = captured.err.splitlines()[0]
    assert first.startswith("warning: NVIDIA GeForce RTX 4090 is not used") and first.endswith(PIP)
    row = json.loads(captured.out.splitlines()[0])
    assert row["system"]["machine_gpus"][0]["name"] == "NVIDIA GeForce RTX 4090"
    assert row["system"]["advice"] == machine_with_rtx.advice
    host = row["host_ms_per_cycle"]
    parts = ("sampling", "draft", "rollback", "bookkeeping")
    assert host["host"] > 0 and host["llama"] > 0 and all(host[p] >= 0 for p in parts)
    assert host["host"] == pytest.approx(sum(host[p] for p in parts), abs=1e-3)  # each part rounded


def test_list_json_carries_the_same_facts(machine_with_rtx: doctor.Report, spectui_home: Path, capsys) -> None:
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["system"] == json.loads(json.dumps(machine_with_rtx.as_json()))
    assert any(row["name"] == "demo" for row in listed["pairs"])


@run_async
async def test_the_chat_says_so_in_a_note_and_in_the_panel_header(machine_with_rtx, tiny_pair, spectui_home) -> None:
    app = RecordingApp(options(tiny_pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        header = shown(app.query_one("#gpu-line", Static))
        assert header.startswith("GPU unused: NVIDIA GeForce RTX 4090") and "spectui doctor" in header
        notes = [shown(note) for note in app.query(NoteMessage)]
        assert any("-DGGML_CUDA=on" in note and "--force-reinstall" in note for note in notes)


@run_async
async def test_without_a_gpu_the_panel_has_no_header_line(tiny_pair, spectui_home, monkeypatch, tmp_path) -> None:
    report = doctor.gather(linux(tmp_path / "empty"))
    monkeypatch.setattr(doctor, "this_machine", lambda: report)
    app = RecordingApp(options(tiny_pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert not app.query_one("#gpu-line", Static).display


def test_a_hostile_gpu_name_is_printed_terminal_safe(tmp_path: Path) -> None:
    bin_dir = fake_program(tmp_path / "bin", "nvidia-smi", "Evil\x1b]0;owned\x07 GPU, 1024, 1.0")
    gpus = find_gpus(linux(tmp_path / "root", bin_dir))
    assert gpus[0].name == "Evil\\x1b]0;owned\\x07 GPU"  # escaped as every name from outside (safe_text)
    line = advice(cpu_build(), gpus)
    assert line is not None and "\x1b" not in line and "\x07" not in line
