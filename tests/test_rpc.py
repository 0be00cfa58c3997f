"""The target split over two real `spectui worker` processes on 127.0.0.1 (llama.cpp RPC).

Real llama.cpp on both sides: the workers are `python -m spectui worker` subprocesses serving
their CPU through `ggml_backend_rpc_start_server`, and the client loads the tiny target onto
their devices through `ggml_backend_rpc_add_server`, by way of spectui's counting relay.
"""

from __future__ import annotations

import codecs
import functools
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rpc_workers import free_port, start_worker

from spectui.engine import rpc
from spectui.engine.events import Finished, Progress
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator, load_generator
from spectui.engine.rpc import wire as rpc_wire
from spectui.errors import RpcError

pytestmark = pytest.mark.skipif(not rpc.rpc_available(), reason="llama-cpp-python built without GGML_RPC")
PROMPT = "The story of the wind"


@pytest.fixture(scope="module")
def workers() -> Iterator[str]:
    pair = [start_worker(), start_worker()]
    yield ",".join(w.endpoint for w in pair)
    for worker in pair:
        worker.stop()


@pytest.fixture(scope="module")
def local(tiny_pair) -> Iterator[Generator]:
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512)
    yield gen
    gen.close()


@pytest.fixture
def remote(tiny_pair, workers) -> Iterator[Generator]:
    """Function-scoped: a worker serves one client at a time, so each test loads and frees."""
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512, rpc=workers)
    yield gen
    gen.close()


def reply(gen: Generator, k, max_tokens: int = 40, control: DraftControl | None = None) -> tuple[Finished, list]:
    gen.reset()
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig())
    events = list(gen.generate(gen.target.tokenize(PROMPT), config, control or DraftControl(k)))
    return events[-1], events


def test_the_target_is_split_over_both_workers_and_the_draft_stays_local(remote):
    cluster = remote.target.rpc
    assert [d.name.startswith("RPC") for d in cluster.devices] == [True, True]
    assert len({d.endpoint for d in cluster.devices}) == 2
    placed = cluster.placed_bytes()
    assert len(placed) == 2 and all(n > 100_000 for n in placed.values()), placed
    assert remote.drafters["model"].model.rpc is None
    # Equal free memory: llama.cpp gives 3 of the 4 layers to the first device, 1 and the output
    # layer to the second (src/llama-model.cpp:1557-1600).
    assert [layers for _, layers in cluster.layer_plan(remote.target.n_layer)] == [3, 1]


@pytest.mark.parametrize("k", [0, 3, AUTO])
def test_greedy_output_over_rpc_equals_the_local_target(local, remote, k):
    baseline, _ = reply(local, 0)
    assert len(baseline.tokens) == 40
    over_rpc, _ = reply(remote, k)
    assert over_rpc.tokens == baseline.tokens
    assert over_rpc.text == baseline.text
    if k != 0:
        assert over_rpc.stats.drafted > 0


def count_decodes(model, monkeypatch) -> dict[str, int]:
    """Count the model's llama_decode calls, with and without logits rows."""
    counts = {"with_logits": 0, "without": 0}
    decode = model._decode

    def counting(tokens, *, n_logits):
        counts["with_logits" if n_logits else "without"] += 1
        return decode(tokens, n_logits=n_logits)

    monkeypatch.setattr(model, "_decode", counting)
    return counts


def test_one_round_trip_per_worker_per_target_pass_whatever_the_batch(remote, monkeypatch):
    """Per decode llama.cpp reads back one hidden state (worker 1 -> worker 2) and, if asked,
    the logits: one GET_TENSOR round trip each, for a 1-row step and a K+1-row verify alike."""
    per_token = {}
    for k in (0, 3):
        decodes = count_decodes(remote.target, monkeypatch)
        before = remote.target.rpc.traffic()
        finished, _ = reply(remote, k)
        traffic = remote.target.rpc.traffic() - before
        assert decodes["with_logits"] == 1 + finished.stats.target_passes  # prompt's last row + cycles
        assert traffic.by_command["GET_TENSOR"] == 2 * decodes["with_logits"] + decodes["without"]
        per_token[k] = traffic.round_trips / len(finished.tokens)
        monkeypatch.undo()
    assert per_token[3] < per_token[0]


def test_added_latency_is_counted_as_waiting(remote):
    cluster = remote.target.rpc
    before = cluster.traffic()
    cluster.set_delay(0.005)
    try:
        reply(remote, 3, max_tokens=8)
    finally:
        cluster.set_delay(0.0)
    traffic = cluster.traffic() - before
    assert traffic.round_trips > 0
    assert traffic.wait_seconds >= 0.005 * traffic.round_trips


def test_tensor_split_puts_every_layer_on_the_first_worker(tiny_pair, workers, local, monkeypatch):
    """With the second worker given no layers, a decode needs only the logits round trip."""
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512, rpc=workers, tensor_split=[1, 0])
    try:
        decodes = count_decodes(gen.target, monkeypatch)
        before = gen.target.rpc.traffic()
        finished, _ = reply(gen, 3)
        traffic = gen.target.rpc.traffic() - before
        assert finished.tokens == reply(local, 0)[0].tokens
        assert traffic.by_command["GET_TENSOR"] == decodes["with_logits"]
        assert [layers for _, layers in gen.target.rpc.layer_plan(gen.target.n_layer)] == [4, 0]
    finally:
        gen.close()


def test_rejection_sampling_stays_lossless_over_rpc(tiny_pair, workers, monkeypatch):
    import lossless

    monkeypatch.setattr(lossless, "N_STEPS", 1000)
    monkeypatch.setattr(lossless, "load_generator", functools.partial(load_generator, rpc=workers))
    p_first, p_second, kinds = lossless.check_lossless(tiny_pair, lossless.PURE)
    assert kinds["accepted_first"] > 100 and kinds["resampled_first"] > 100
    assert p_first > 0.001 and p_second > 0.001


def test_a_worker_killed_mid_reply_ends_it_with_one_line_keeping_its_tokens(tiny_pair, local):
    baseline, _ = reply(local, 0, max_tokens=120)
    survivor, victim = start_worker(), start_worker()
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512,
                         rpc=f"{survivor.endpoint},{victim.endpoint}")
    try:
        gen.reset()
        config = GenerationConfig(max_tokens=120, sampling=SamplingConfig())
        cycles, events = 0, []
        for event in gen.generate(gen.target.tokenize(PROMPT), config, DraftControl(3)):
            events.append(event)
            cycles += isinstance(event, Progress)
            if cycles == 4 and victim.process.poll() is None:
                victim.stop()
        finished = events[-1]
        assert finished.reason == "worker"
        assert victim.endpoint in finished.message and "\n" not in finished.message
        assert "start the worker again" in finished.message
        assert 4 <= len(finished.tokens) < 120
        assert list(finished.tokens) == list(baseline.tokens[: len(finished.tokens)])
        # the text of the tokens kept, less a character the last one only began (left out, #36)
        kept = b"".join(gen.target.token_bytes(t) for t in finished.tokens)
        assert finished.text == codecs.getincrementaldecoder("utf-8")("replace").decode(kept)
    finally:
        gen.close()  # freeing a model whose worker is gone must not abort the process
        survivor.stop()
        victim.stop()


def test_an_unreachable_or_wrong_endpoint_is_one_line(tiny_pair):
    port = free_port()
    with pytest.raises(RpcError, match=rf"worker 127.0.0.1:{port} refused the connection: start `spectui worker"):
        load_generator(tiny_pair.target, tiny_pair.draft, rpc=f"127.0.0.1:{port}")
    with pytest.raises(RpcError, match="is not a worker address: write HOST:PORT"):
        rpc_wire.parse_endpoints("localhost")
    with pytest.raises(RpcError, match="unknown host"):
        rpc.connect("no-such-host.invalid:50052")


def fake_server(answer: bytes | None) -> tuple[str, threading.Thread]:
    """A server that reads one HELLO and sends `answer` (None: closes without answering)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            rpc_wire.recv_exact(conn, 9 + rpc_wire.CONN_CAPS_SIZE)
            if answer is not None:
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{listener.getsockname()[1]}", thread


def test_another_protocol_version_is_one_line_naming_both():
    old = rpc_wire.response(bytes([6, 1, 0, 0]) + bytes(rpc_wire.CONN_CAPS_SIZE))
    endpoint, thread = fake_server(old)
    mismatch = rf"worker {endpoint} speaks llama.cpp RPC protocol 6.1.0, this spectui speaks 7.0.0"
    with pytest.raises(RpcError, match=mismatch):
        rpc.connect(endpoint)
    thread.join()
    endpoint, thread = fake_server(None)
    with pytest.raises(RpcError, match="closed the connection at the handshake: it speaks another"):
        rpc.connect(endpoint)
    thread.join()


def test_a_build_without_rpc_says_how_to_rebuild(monkeypatch):
    monkeypatch.setattr(rpc, "rpc_calls", lambda: None)
    pip = r"\S+ -m pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0\.3\.36"
    with pytest.raises(RpcError, match=rf'CMAKE_ARGS="-DGGML_RPC=ON -DLLAVA_BUILD=OFF" {pip} \(--no-cache-dir'):
        rpc.connect("127.0.0.1:50052")


def test_worker_ctrl_c_is_one_line_and_exit_130():
    worker = start_worker()
    worker.process.send_signal(signal.SIGINT)
    assert worker.process.wait(timeout=30) == 130
    assert worker.output().strip().splitlines()[-1] == "spectui worker: stopped"
    worker.stop()


def test_worker_on_another_address_prints_llama_cpp_warning_and_the_safe_way():
    worker = start_worker(host="127.0.0.2")
    worker.process.send_signal(signal.SIGINT)
    worker.process.wait(timeout=30)
    text = worker.output()
    assert "Never expose the RPC server to an open network!" in text
    assert "ssh -N -L" in text and "--rpc 127.0.0.1:" in text
    worker.stop()


def test_worker_on_a_busy_port_is_one_line():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "spectui", "worker", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"spectui: cannot listen on 127.0.0.1:{port} (Address already in use); pick another --port or --host"
    ]


def test_relay_answers_for_a_dead_worker_with_well_formed_dummies():
    get = rpc_wire.request(rpc_wire.Cmd.GET_TENSOR, bytes(296) + struct.pack("<QQ", 0, 24))
    assert rpc_wire.fake_response(rpc_wire.Cmd.GET_TENSOR, get[9:]) == struct.pack("<Q", 24) + bytes(24)
    hello = rpc_wire.fake_response(rpc_wire.Cmd.HELLO, b"")
    assert hello[8:11] == bytes(rpc_wire.PROTOCOL_VERSION)


def test_rpc_options_parse_for_chat_and_bench():
    from spectui.cli import build_parser, with_default_command

    parser = build_parser()
    args = parser.parse_args(with_default_command(["--rpc", "10.0.0.2:50052,10.0.0.3:50052", "--tensor-split", "3,1"]))
    assert (args.command, args.rpc, args.tensor_split) == ("chat", "10.0.0.2:50052,10.0.0.3:50052", [3.0, 1.0])
    assert parser.parse_args(["bench", "--rpc", "h:1"]).rpc == "h:1"
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--tensor-split", "1,-1"])


def test_a_worker_gone_between_connect_and_load_is_one_line_not_an_abort(tiny_pair):
    from spectui.engine.model.llama_model import LlamaModel
    from spectui.errors import WorkerLostError

    worker = start_worker()
    cluster = rpc.connect(worker.endpoint)
    worker.stop()
    with pytest.raises(WorkerLostError, match=rf"worker {worker.endpoint} stopped answering \(cannot connect"):
        LlamaModel.load(tiny_pair.target, n_ctx=256, rpc=cluster)
    cluster.close()


# ----- a pair's own workers (models.toml) ---------------------------------------------------------


def write_far_pair(home: Path, rpc: str) -> Path:
    """The user's models.toml with one pair, `far`, whose target runs on the workers `rpc`."""
    config = home / "config" / "models.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[pairs.far]\ndescription = "far"\nsize_gb = 0.1\nrpc = "{rpc}"\n'
                      '[pairs.far.target]\nrepo = "me/T-GGUF"\nfiles = ["target.gguf"]\n'
                      '[pairs.far.draft]\nrepo = "me/D-GGUF"\nfiles = ["draft.gguf"]\n')
    return config


def test_a_pair_in_models_toml_brings_its_workers_and_rpc_on_the_command_line_wins(
        tiny_pair, workers, spectui_home, capsys):
    import json

    from spectui.catalog import record
    from spectui.cli import main

    write_far_pair(spectui_home, workers)
    files = {name: record.PulledFile(path=str(path), size=path.stat().st_size)
             for name, path in (("target", tiny_pair.target), ("draft", tiny_pair.draft))}
    record.add_pair("far", record.PulledPair(target=[files["target"]], draft=[files["draft"]], recommended_k=3,
                                             description="far", pulled_at=record.now()))
    bench = ["bench", "--pair", "far", "-k", "3", "--max-tokens", "8", "--threads", "1", "--json"]
    assert main(bench) == 0
    row = json.loads(capsys.readouterr().out)
    assert sorted(d["endpoint"] for d in row["devices"]) == sorted(workers.split(","))
    # --rpc wins: a worker nobody listens on is refused in one line, naming it
    dead = f"127.0.0.1:{free_port()}"
    assert main([*bench, "--rpc", dead]) != 0
    error = capsys.readouterr().err.splitlines()[-1]  # after the bench's warnings
    assert error.startswith("spectui: ") and dead in error and "refused the connection" in error


def test_a_bad_rpc_in_models_toml_is_one_line_naming_the_file(spectui_home):
    from spectui.catalog.loader import load_catalog
    from spectui.errors import CatalogError

    config = write_far_pair(spectui_home, "nohost")
    with pytest.raises(CatalogError) as caught:
        load_catalog()
    message = str(caught.value)
    assert message.startswith(str(config)) and "rpc" in message and "HOST:PORT" in message and "\n" not in message


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_worker_sigterm_and_sighup_are_one_line_and_128_plus_the_signal(signum):
    worker = start_worker()
    worker.process.send_signal(signum)
    assert worker.process.wait(timeout=30) == 128 + signum
    assert worker.output().strip().splitlines()[-1] == f"spectui worker: stopped ({signal.Signals(signum).name})"
    worker.stop()
