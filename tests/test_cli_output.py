"""Output that cannot go where it should, and other programs' odd output, are one line, not a traceback.

`spectui doctor` reads `nvidia-smi` (a fake one first on PATH here): bytes that are not UTF-8 and
figures that are digits only to `str.isdigit` (`²`) are shown as what they are, and `--json`
still prints its object. A command started with its standard output closed, or writing into a
full one (/dev/full), says so in one line on stderr and exits 1, blaming the output, not
spectui's own directory.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spectui.cli import main

ODD_NVIDIA_SMI = b"NVIDIA \xff\xfe GPU, \xc2\xb2, 550.54.14\nNVIDIA second, 24564, 550.54.14\n"
"""A name with bytes that are not UTF-8, then a memory figure `\u00b2`; a second card as usual."""


def fake_nvidia_smi(directory: Path, output: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "output"
    data.write_bytes(output)
    program = directory / "nvidia-smi"
    program.write_text(f"#!/bin/sh\ncat '{data}'\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return directory


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("spectui: ")
    return lines[0]


def test_doctor_shows_an_nvidia_smi_that_prints_odd_bytes_and_figures(tmp_path: Path, monkeypatch,
                                                                      capsys) -> None:
    bin_dir = fake_nvidia_smi(tmp_path / "bin", ODD_NVIDIA_SMI)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA \ufffd\ufffd GPU, driver 550.54.14 [nvidia-smi]" in out  # no memory figure: unknown
    assert "NVIDIA second, 24.0 GiB, driver 550.54.14 [nvidia-smi]" in out
    assert main(["doctor", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["machine_gpus"]
    assert [(g["name"], g["memory_bytes"]) for g in gpus[:2]] == [
        ("NVIDIA \ufffd\ufffd GPU", None), ("NVIDIA second", 24564 * 1024 * 1024)]


def run(command: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], capture_output=kwargs.pop("capture", True), text=True,
                          timeout=120, check=False, **kwargs)  # type: ignore[call-overload]


@pytest.mark.parametrize("argv", ["doctor", "list", "export", "--version"])
def test_a_closed_standard_output_is_one_line(spectui_home: Path, argv: str) -> None:
    done = run(f"exec '{sys.executable}' -m spectui {argv} >&-")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "the standard output is closed" in line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("argv", ["doctor", "doctor --json", "list"])
def test_a_full_standard_output_is_blamed_not_spectuis_directory(spectui_home: Path, argv: str) -> None:
    done = run(f"exec '{sys.executable}' -m spectui {argv} > /dev/full")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "cannot write to the standard output (No space left on device)" in line
    assert "SPECTUI_HOME" not in line and str(spectui_home) not in line


@pytest.mark.parametrize("port", ["²", "٣٠٠٠", "5O52"])
def test_a_worker_port_that_only_str_isdigit_takes_is_one_line(port: str) -> None:
    from spectui.engine.rpc.wire import parse_endpoint
    from spectui.errors import RpcError

    with pytest.raises(RpcError, match="is not a worker address: write HOST:PORT"):
        parse_endpoint(f"192.168.1.20:{port}")
