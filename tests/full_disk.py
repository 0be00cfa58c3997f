"""A folder where writes fail as on a full disk, and `spectui` run against it in its own process.

Two ways (`KINDS`; a test module's fixture gives each in turn through `full_disk`):

- `tmpfs`: a small tmpfs mounted on a fresh folder and filled with a filler file until a write
  fails (ENOSPC): a real full file system. Needs the right to mount (root outside an unprivileged
  container); skipped where `mount` is refused.
- `fsize`: the command's process gets an RLIMIT_FSIZE of a few KB (SIGXFSZ ignored), so a write
  that would grow any file past it fails (EFBIG) as a full disk would, midway: any POSIX host,
  any user.

Files a test makes before `fill()` are written as usual; after it, only the command run with
`run()` (or `run_python()`) meets the full disk, and `make_room()` ends it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

TMPFS_SIZE = "4m"
FSIZE_LIMIT = 4096
"""Bytes any file of the command may grow to under `fsize`: less than a chat store's first pages."""
KINDS = ("tmpfs", "fsize")
LIMITED = ("import os, resource, signal, sys\n"
           "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
           "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))\n"
           "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n")
"""`python -c LIMITED BYTES ARGS...`: `python ARGS...` under that file size limit (an ignored signal
and the limit both survive exec: no preexec_fn, which is unsafe in a process with threads)."""


@dataclass
class FullDisk:
    kind: str
    folder: Path
    home: Path
    full: bool = False

    def fill(self) -> None:
        """From now on writes in `folder` fail."""
        if self.kind == "tmpfs":
            with open(self.folder / "filler", "wb") as filler:
                with contextlib.suppress(OSError):
                    while True:
                        filler.write(bytes(65536))
                        filler.flush()
                with contextlib.suppress(OSError):
                    os.fsync(filler.fileno())
            probe = self.folder / "probe"
            with contextlib.suppress(OSError), open(probe, "wb") as f:  # the last partial page, too
                while True:
                    f.write(b"x")
                    f.flush()
            probe.unlink(missing_ok=True)
        self.full = True

    def make_room(self) -> None:
        if self.kind == "tmpfs":
            (self.folder / "filler").unlink(missing_ok=True)
        self.full = False

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`spectui ARGS...` with SPECTUI_HOME in the folder, in its own process."""
        return self.run_python("-m", "spectui", *args)

    def run_python(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SPECTUI_HOME": str(self.home), "PYTHONDONTWRITEBYTECODE": "1"}
        limited = self.kind == "fsize" and self.full
        command = [sys.executable, "-c", LIMITED, str(FSIZE_LIMIT), *args] if limited else [sys.executable, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)


def _mount_tmpfs(folder: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(folder)],
                          capture_output=True, timeout=30, check=False)
    return done.returncode == 0


@contextmanager
def full_disk(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    """A `FullDisk` of `kind` (one of KINDS) with SPECTUI_HOME inside it; skips where a tmpfs
    cannot be mounted."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = False
    if kind == "tmpfs":
        mounted = _mount_tmpfs(folder)
        if not mounted:
            pytest.skip("cannot mount a tmpfs here (not root, or a container without the right): "
                        "the fsize variant covers the same writes")
    home = folder / "home"
    monkeypatch.setenv("SPECTUI_HOME", str(home))
    try:
        yield FullDisk(kind, folder, home)
    finally:
        if mounted:
            done = subprocess.run(["umount", str(folder)], capture_output=True, timeout=30, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30, check=False)


def no_space(error: str) -> bool:
    """The system's words for a full disk, as either kind gives them."""
    return any(words in error for words in (os.strerror(errno.ENOSPC), os.strerror(errno.EFBIG),
                                            "database or disk is full", "disk I/O error"))
