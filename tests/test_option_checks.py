"""Options that were accepted without a word or ended in a traceback: each is one line naming the
option and what to write (`worker --threads/--port/--host/--cache`, `--tensor-split`)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cli_output import one_error_line

from spectui.cli import main


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--threads", "0"], "worker --threads: must be a whole number from 1 to 512, not 0"),
    (["--threads", "-5"], "worker --threads: must be a whole number from 1 to 512, not -5"),
    (["--port", "0"], "worker --port: must be a whole number from 1 to 65535, not 0"),
    (["--port", "65536"], "worker --port: must be a whole number from 1 to 65535, not 65536"),
    (["--host", "::1"], "worker --host: '::1' is an IPv6 address, and llama.cpp's RPC server listens on IPv4 only; "
                        "use 127.0.0.1"),
    (["--host", "[::1]"], "is an IPv6 address"),
    (["--host", " "], "worker --host: must be an IPv4 address or a host name"),  # '' would listen on 0.0.0.0
    (["--cache", ""], "worker --cache: must be a path to a file, not an empty string"),
])
def test_a_bad_worker_option_is_one_line(argv: list[str], expected: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", *argv])
    assert exited.value.code == 2
    assert expected in one_error_line(capsys.readouterr().err)


def test_worker_cache_must_be_a_writable_folder(tmp_path: Path, spectui_home: Path, capsys) -> None:
    a_file = tmp_path / "weights"
    a_file.write_text("")
    assert main(["worker", "--port", str(free_port()), "--cache", str(a_file)]) == 1
    assert (f"worker --cache {a_file}: that is a file, not a folder; give a folder for the received weights"
            in one_error_line(capsys.readouterr().err))


def test_worker_host_that_names_nothing_is_one_line(capsys) -> None:
    assert main(["worker", "--host", "no-such-host.invalid", "--port", str(free_port())]) == 1
    assert "worker --host 'no-such-host.invalid': no IPv4 address by that name here" in one_error_line(
        capsys.readouterr().err)


@pytest.mark.parametrize("command", ["bench", "chat"])
def test_tensor_split_without_rpc_has_nothing_to_split_over(command: str, tiny_pair, spectui_home: Path,
                                                           capsys) -> None:
    assert main([command, "--target", str(tiny_pair.target), "--tensor-split", "3,1"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "--tensor-split shares the target between --rpc workers" in line and "add --rpc HOST:PORT" in line


@pytest.mark.parametrize("value", ["nan", "inf", "1,nan", "-1,2", "0,0", ","])
def test_tensor_split_needs_finite_shares(value: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--rpc", "127.0.0.1:50052", f"--tensor-split={value}"])
    assert "bench --tensor-split: needs non-negative shares such as 3,1" in one_error_line(capsys.readouterr().err)
