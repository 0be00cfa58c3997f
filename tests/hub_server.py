"""A local stand-in for the Hugging Face Hub's file endpoints, for pull tests.

It answers `HEAD`/`GET /{owner}/{name}/resolve/{revision}/{filename}` the way the Hub does for
huggingface_hub's `get_hf_file_metadata`, `http_get` and `hf_hub_download`: `ETag` (the sha256
of the content, as for LFS files), `X-Repo-Commit`, `Content-Length`, `Accept-Ranges`, and a
`206 Partial Content` for a `Range: bytes=N-` request. Errors carry the Hub's `X-Error-Code`
(`RepoNotFound`, `EntryNotFound`, `GatedRepo`), so the real client raises its real exceptions.

Faults for tests: `cut_after(repo, file, n)` closes the connection after n body bytes on the next
GET of that file and answers later GETs with 500 until `heal()`; `gate(repo)` answers 401.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<file>.+)$")
RANGE = re.compile(r"^bytes=(?P<start>\d+)-(?P<end>\d*)$")


@dataclass
class Request:
    """One request the server saw."""

    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class HubState:
    """What the server serves and how it misbehaves; shared with the handler threads."""

    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    cuts: dict[tuple[str, str], int] = field(default_factory=dict)
    broken: set[tuple[str, str]] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    body_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    delay_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeHub:
    """The server, running in a daemon thread on 127.0.0.1 and a free port."""

    def __init__(self) -> None:
        self.state = HubState()
        handler = type("Handler", (HubHandler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ----- content -----

    def add(self, repo: str, filename: str, data: bytes | Path) -> None:
        content = data.read_bytes() if isinstance(data, Path) else data
        self.state.files[(repo, filename)] = content

    def gate(self, repo: str) -> None:
        self.state.gated.add(repo)

    def cut_after(self, repo: str, filename: str, n_bytes: int) -> None:
        self.state.cuts[(repo, filename)] = n_bytes

    def heal(self) -> None:
        self.state.broken.clear()
        self.state.cuts.clear()

    # ----- observations -----

    def gets(self, filename: str) -> list[Request]:
        return [r for r in self.state.requests if r.method == "GET" and r.path.endswith("/" + filename)]

    def sent(self, repo: str, filename: str) -> int:
        """Body bytes sent for this file over all GETs so far."""
        return self.state.body_bytes.get((repo, filename), 0)


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: HubState

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    # ----- routing -----

    def _serve(self, body: bool) -> None:
        with self.state.lock:
            self.state.requests.append(Request(
                self.command, self.path, self.headers.get("Range"), self.headers.get("Authorization"),
            ))
        match = RESOLVE.match(self.path.split("?")[0])
        if match is None:
            return self._error(404, "RepoNotFound", "no such endpoint")
        repo, name = match["repo"], match["file"]
        if repo in self.state.gated:
            return self._error(
                401, "GatedRepo", f"Access to model {repo} is restricted. You must have access to it."
            )
        if not any(r == repo for r, _ in self.state.files):
            return self._error(404, "RepoNotFound", "Repository not found")
        data = self.state.files.get((repo, name))
        if data is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist on main")
        if body and (repo, name) in self.state.broken:
            return self._error(500, None, "internal error")
        self._send_file(repo, name, data, body)

    def _error(self, status: int, code: str | None, message: str) -> None:
        payload = message.encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if code == "EntryNotFound":
            self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _send_file(self, repo: str, name: str, data: bytes, body: bool) -> None:
        start = 0
        wanted = RANGE.match(self.headers.get("Range", "") or "")
        self.send_response(206 if wanted and body else 200)
        if wanted and body:
            start = int(wanted["start"])
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if body:
            self._write_body(repo, name, data[start:])

    def _write_body(self, repo: str, name: str, chunk: bytes) -> None:
        key = (repo, name)
        with self.state.lock:
            cut = self.state.cuts.pop(key, None)
            if cut is not None:
                self.state.broken.add(key)  # later GETs fail until heal(): the pull gives up
        if self.state.delay_s:
            threading.Event().wait(self.state.delay_s)
        payload = chunk if cut is None else chunk[:cut]
        self.wfile.write(payload)
        self.wfile.flush()
        with self.state.lock:
            self.state.body_bytes[key] = self.state.body_bytes.get(key, 0) + len(payload)
        if cut is not None:
            self.close_connection = True
            self.connection.shutdown(2)


TARGET_REPO = "test-org/Tiny-Target-GGUF"


DRAFT_REPO = "test-org/Tiny-Draft-GGUF"


def pair_toml(name: str, target: tuple[str, list[str]], draft: tuple[str, list[str]]) -> str:
    def model(role: str, repo: str, files: list[str]) -> str:
        return f'[pairs."{name}".{role}]\nrepo = "{repo}"\nfiles = {json.dumps(files)}\n'

    return (
        f'[pairs."{name}"]\ndescription = "test pair {name}"\nsize_gb = 0.001\nrecommended_k = 3\n'
        + model("target", *target) + model("draft", *draft)
    )


def write_catalog(home: Path, *pairs: str) -> None:
    path = home / "config" / "models.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(pairs))
