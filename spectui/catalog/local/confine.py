"""Paths built from outside input stay inside the store they name.

A reference (`ollama:`, `lmstudio:`, `hf:`), a manifest's digest or a folder in `config.toml` is
text spectui did not write. Each store resolver builds its path from checked parts only
(`relative_parts`, `ollama_blob_name`), then checks with `inside` that the file, links followed,
lies under the store's own folder. The links a store makes itself keep working: the Hugging Face
cache's `snapshots/REV/FILE -> ../../blobs/ETAG` stays inside the repo's folder, and a store whose
folder is itself a link (models moved to another disk) is compared after resolving both sides.

Every refusal is one `LocalModelError` line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from spectui.errors import LocalModelError

OLLAMA_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
"""What an Ollama manifest's layer digest must be: `sha256:` and 64 lower-case hex digits, the
form Ollama writes (its blob is then `blobs/sha256-<hex>`)."""


def relative_parts(text: str) -> list[str] | None:
    """The `/`-separated parts of a relative path inside a store, or None when `text` is not one:
    empty, absolute, a part that is empty, `.` or `..`, or a backslash or NUL anywhere (another
    separator, or a name no file system accepts)."""
    if not text or "\\" in text or "\0" in text:
        return None
    parts = text.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return parts


def inside(root: Path, path: Path, what: str) -> Path:
    """`path` if it lies inside `root` once links are followed on both sides, else one line.

    `what` names the store for the message (e.g. "Ollama's store at /x"). A path that cannot be
    resolved (a loop of links) is refused the same way.
    """
    try:
        real_root = root.resolve()
        real = path.resolve()
    except (OSError, RuntimeError, ValueError) as error:
        raise LocalModelError(f"{path} cannot be resolved ({_reason(error)}); it is not used") from None
    if real != real_root and not real.is_relative_to(real_root):
        raise LocalModelError(
            f"{path} leads to {real}, outside {what}; spectui only opens files inside the store "
            "that names them"
        )
    return path


def is_inside(root: Path, path: Path) -> bool:
    """`inside` as a yes/no (for walks that skip rather than fail)."""
    try:
        inside(root, path, "")
    except LocalModelError:
        return False
    return True


def ollama_blob_name(digest: object) -> str | None:
    """`sha256-<hex>` for a valid manifest digest, else None."""
    if not isinstance(digest, str) or (match := OLLAMA_DIGEST.fullmatch(digest)) is None:
        return None
    return f"sha256-{match[1]}"


def is_file(path: Path) -> bool:
    """`Path.is_file`, but False (never an exception) for a path this user may not look at, a
    name too long, or one with a NUL in it."""
    try:
        return os.path.isfile(path)
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


def _reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__
