"""Run llama.cpp's own server tests (tools/server/tests, vendored in llama-cpp-python's sdist)
against `spectui serve`, the way they run against an external llama-server.

Their harness (tests/utils.py) targets a running server when DEBUG_EXTERNAL is set, on PORT: it
then starts and stops nothing, so every test talks to the one server started here. Tests that
need llama-server's own test model (stories260K: exact texts, token counts), a launch option
(`server.jinja = False`, `n_slots`, a chat template override) or an endpoint spectui does not
have are expected to fail; docs/SERVE.md lists each with its reason. The tests download nothing
when external, so `wget` (which their utils import) is stubbed here rather than installed.

    python scripts/llama_server_tests.py                       # the demo pair, test_chat_completion.py
    python scripts/llama_server_tests.py --files test_chat_completion.py test_completion.py \\
        --json docs/llama_server_tests.json -- --target M.gguf --draft D.gguf

Needs: pytest, openai, requests, filelock (all in the dev venv). Writes nothing into the sdist
(no cache, results to --json). Exit status 0 when the run completed (failures included).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

VENDORED = Path("/work/src/llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/tests")
PRESET = ["demo", "--ctx", "512", "--max-tokens", "64", "--seed", "42"]
"""The test suite's `tinyllama2` preset (n_ctx 512, n_predict 64, seed 42) on the demo pair."""
WGET_STUB = 'def download(*args, **kwargs):\n    raise RuntimeError("no downloads against an external server")\n'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(port: int, server: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"spectui serve exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("spectui serve did not become ready in time")


def results(junit: Path) -> list[dict[str, str]]:
    """One row per test case: its id, outcome and the first line of why it failed."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, why = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                why = (child.get("message") or "").splitlines()[0][:200] if child.get("message") else ""
        rows.append({"test": f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}",
                     "outcome": outcome, "why": why})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, default=VENDORED, help="llama.cpp's tools/server/tests folder")
    parser.add_argument("--files", nargs="+", default=["test_chat_completion.py"], help="files under unit/")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the server to load")
    parser.add_argument("serve", nargs="*", default=PRESET, help="`spectui serve` arguments (after --)")
    args = parser.parse_args()
    if not (args.tests / "utils.py").is_file():
        raise SystemExit(f"llama.cpp's server tests are not at {args.tests}: pass --tests "
                         "(tools/server/tests of a llama.cpp source tree, e.g. llama-cpp-python's sdist)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="llama-server-tests-") as scratch:
        Path(scratch, "wget.py").write_text(WGET_STUB)
        command = [sys.executable, "-m", "spectui", "serve", *args.serve, "--port", str(port), "--no-warm-up"]
        print("$", " ".join(command), flush=True)
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_ready(port, server, time.monotonic() + args.timeout)
            junit = Path(scratch, "junit.xml")
            env = {**os.environ, "DEBUG_EXTERNAL": "1", "PORT": str(port),
                   "PYTHONPATH": os.pathsep.join([scratch, os.environ.get("PYTHONPATH", "")])}
            pytest = [sys.executable, "-m", "pytest", *[f"unit/{f}" for f in args.files], "-q",
                      "-p", "no:cacheprovider", "-o", "addopts=", f"--junitxml={junit}"]
            if args.select:
                pytest += ["-k", args.select]
            subprocess.run(pytest, cwd=args.tests, env=env, check=False)
            rows = results(junit)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    passed = sum(r["outcome"] == "passed" for r in rows)
    print(f"\n{passed} of {len(rows)} passed against spectui serve {' '.join(args.serve)}")
    for row in rows:
        print(f"{row['outcome']:8} {row['test']}  {row['why']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"serve": args.serve, "files": args.files, "passed": passed,
                                         "total": len(rows), "results": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
