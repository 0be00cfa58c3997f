"""Download GGUF files from the Hugging Face Hub into its shared cache, resumably.

huggingface_hub does the talking: `get_hf_file_metadata` (HEAD: size, ETag, commit), `http_get`
(the GET with its retries, `Range` resumption and `tqdm` progress bar), `hf_hub_download` (places
the finished blob in the cache's snapshot layout) and `try_to_load_from_cache`. Since
huggingface_hub 1.x, `hf_hub_download` discards a partial file when a download is interrupted; a
multi-GB GGUF must survive Ctrl-C, so the bytes go into `blobs/<etag>.incomplete` (the name
older huggingface_hub versions resumed from) and continue from there on the next pull.

`HF_ENDPOINT`, `HF_HOME`, `HF_HUB_CACHE` and `HF_TOKEN` are read when a pull starts, not when
huggingface_hub is imported.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from spectui.errors import PullError

DEFAULT_ENDPOINT = "https://huggingface.co"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
DISK_MARGIN = 64 * 1024 * 1024
Log = Callable[[str], None]


@dataclass(frozen=True)
class RemoteFile:
    """A file to fetch: repo, file name inside it, and branch/tag/commit (None = main)."""

    repo: str
    filename: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{self.repo}:{self.filename}"


@dataclass
class FileInfo:
    """What a HEAD request told us about a `RemoteFile`, and what the cache already holds."""

    remote: RemoteFile
    url: str
    commit: str
    etag: str
    size: int | None
    headers: dict[str, str] = field(repr=False)
    cached: Path | None = None
    partial_bytes: int = 0


def endpoint() -> str:
    """The Hub (or mirror) to talk to: `HF_ENDPOINT`, read now."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/") or DEFAULT_ENDPOINT


def hub_cache_dir() -> Path:
    """huggingface_hub's cache: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else its default."""
    if value := os.environ.get("HF_HUB_CACHE"):
        return Path(value).expanduser()
    if value := os.environ.get("HF_HOME"):
        return Path(value).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_page(repo: str) -> str:
    return f"{endpoint()}/{repo}"


def _storage(repo: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return hub_cache_dir() / repo_folder_name(repo_id=repo, repo_type="model")


def blob_path(info: FileInfo) -> Path:
    return _storage(info.remote.repo) / "blobs" / info.etag


def partial_path(info: FileInfo) -> Path:
    blob = blob_path(info)
    return blob.with_name(blob.name + ".incomplete")


def lock_path(info: FileInfo) -> Path:
    """The same lock file huggingface_hub takes for this blob, so we exclude it too."""
    from huggingface_hub.file_download import repo_folder_name

    folder = repo_folder_name(repo_id=info.remote.repo, repo_type="model")
    return hub_cache_dir() / ".locks" / folder / f"{info.etag}.lock"


# ----- errors ---------------------------------------------------------------------------------


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Network failures of whichever HTTP client this huggingface_hub uses."""
    found: list[type[BaseException]] = []
    for module in ("httpx2", "httpx", "requests"):
        try:
            mod = __import__(module)
        except ImportError:
            continue
        base = getattr(mod, "TransportError", None) or getattr(mod, "ConnectionError", None)
        if base is not None:
            found.append(base)
    return tuple(found)


def _gated_hint(repo: str) -> str:
    return (
        f"open {repo_page(repo)} while logged in and accept its terms, then run "
        "`hf auth login` or set HF_TOKEN to a token with read access"
    )


def pull_error(error: BaseException, remote: RemoteFile, verb: str = "download") -> PullError:
    """A one-line `PullError` for anything huggingface_hub or the OS raised."""
    from huggingface_hub import errors as hf

    repo, name = remote.repo, remote.filename
    if isinstance(error, hf.GatedRepoError):
        return PullError(f"{repo} is gated and this account has no access: {_gated_hint(repo)}")
    if isinstance(error, hf.RevisionNotFoundError):
        return PullError(
            f"revision {remote.revision!r} not found in {repo}; fix the revision"
        )
    if isinstance(error, hf.RemoteEntryNotFoundError):
        return PullError(f"file {name} not found in {repo} (404); check the file name")
    if isinstance(error, hf.HfHubHTTPError):
        return _http_status_error(error, remote, verb)
    if isinstance(error, hf.OfflineModeIsEnabled):
        return PullError(f"cannot {verb} {remote}: HF_HUB_OFFLINE is set; unset it to download")
    if isinstance(error, _transport_errors()):
        return PullError(
            f"network error during {verb} of {remote} ({type(error).__name__}: {error}); "
            "check the connection (and HF_ENDPOINT) and run the pull again to resume"
        )
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return PullError(
            f"disk full while downloading {remote} into {hub_cache_dir()}; "
            "free some space (or set HF_HUB_CACHE to a bigger disk) and run the pull again"
        )
    if isinstance(error, OSError):
        reason = str(error).splitlines()[0]
        return PullError(f"{verb} of {remote} failed ({reason}); run the pull again to resume")
    raise error


def _http_status_error(error: BaseException, remote: RemoteFile, verb: str) -> PullError:
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    repo = remote.repo
    if status == 401:
        return PullError(
            f"{repo} refused access (401): it is gated or private, or the name is wrong; "
            f"{_gated_hint(repo)}"
        )
    if status == 403:
        return PullError(f"{repo} refused access (403): it is gated; {_gated_hint(repo)}")
    if status == 404:
        return PullError(
            f"{remote.filename} or the repo {repo} was not found (404); "
            "check both names"
        )
    return PullError(f"{verb} of {remote} failed (HTTP {status}); run the pull again to resume")


# ----- metadata and disk ----------------------------------------------------------------------


def inspect(remote: RemoteFile) -> FileInfo:
    """HEAD the file: its size, ETag and commit, and whether the cache already holds it."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(remote.repo, remote.filename, revision=remote.revision, endpoint=endpoint())
    headers = build_hf_headers()
    try:
        meta = get_hf_file_metadata(url, headers=headers, endpoint=endpoint())
    except Exception as error:
        raise pull_error(error, remote, "lookup") from error
    if not meta.commit_hash or not meta.etag:
        raise PullError(
            f"{endpoint()} did not answer like the Hugging Face Hub for {remote} "
            "(no commit or ETag header); check HF_ENDPOINT"
        )
    download_url = meta.location or url
    if urlsplit(download_url).netloc != urlsplit(url).netloc:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    info = FileInfo(remote, download_url, meta.commit_hash, meta.etag, meta.size, headers)
    info.cached = _cached_copy(info)
    partial = partial_path(info)
    if info.cached is None and partial.exists():
        info.partial_bytes = partial.stat().st_size
    return info


def _cached_copy(info: FileInfo) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(
        info.remote.repo, info.remote.filename, cache_dir=hub_cache_dir(), revision=info.commit
    )
    if not isinstance(found, str):
        return None
    path = Path(found)
    if info.size is not None and path.stat().st_size != info.size:
        return None
    return path


def bytes_needed(infos: Iterable[FileInfo]) -> int:
    """Bytes still to download (what is cached or partly downloaded does not count)."""
    total = 0
    for info in infos:
        if info.cached is None and info.size is not None:
            total += max(info.size - info.partial_bytes, 0)
    return total


def check_free_space(needed: int, directory: Path | None = None) -> None:
    """Raise `PullError` unless `directory`'s disk has `needed` bytes (plus a margin) free."""
    directory = directory or hub_cache_dir()
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if needed + DISK_MARGIN > free:
        raise PullError(
            f"not enough disk space in {directory}: the pull needs {gb(needed)} and "
            f"{gb(free)} is free; free some space or set HF_HUB_CACHE to a bigger disk"
        )


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


# ----- download -------------------------------------------------------------------------------


def fetch(info: FileInfo, *, tqdm_class: type | None = None, log: Log | None = None) -> Path:
    """The file's path in the Hub cache, downloading (or resuming) it first if needed."""
    if info.cached is not None:
        if log:
            log(f"{info.remote}: already in the Hub cache ({info.cached})")
        return info.cached
    from huggingface_hub.utils import WeakFileLock

    blob = blob_path(info)
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock_path(info).parent.mkdir(parents=True, exist_ok=True)
    try:
        with WeakFileLock(lock_path(info)):
            if not blob.exists():
                _download_blob(info, blob, tqdm_class)
        return _link_into_snapshot(info)
    except PullError:
        raise
    except Exception as error:
        raise pull_error(error, info.remote) from error


def _download_blob(info: FileInfo, blob: Path, tqdm_class: type | None) -> None:
    """GET into `<blob>.incomplete`, continuing after the bytes already there; then verify."""
    from huggingface_hub.file_download import http_get

    partial = partial_path(info)
    resume = partial.stat().st_size if partial.exists() else 0
    if info.size is not None and resume > info.size:
        partial.unlink()
        resume = 0
    with partial.open("r+b" if resume else "wb") as f:
        f.seek(resume)
        http_get(
            info.url,
            f,
            resume_size=resume,
            headers=info.headers,
            expected_size=info.size,
            displayed_filename=info.remote.filename,
            tqdm_class=tqdm_class,
        )
        f.flush()
        os.fsync(f.fileno())  # on disk before it takes the blob's name
    _verify_sha256(info, partial)
    os.replace(partial, blob)


def _verify_sha256(info: FileInfo, path: Path) -> None:
    """An LFS file's ETag is the sha256 of its content: check it, drop the file on mismatch."""
    if not SHA256.match(info.etag):
        return
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            digest.update(chunk)
    if digest.hexdigest() != info.etag:
        path.unlink(missing_ok=True)
        raise PullError(
            f"{info.remote} arrived corrupted (sha256 mismatch); it was deleted, run the pull again"
        )


def _link_into_snapshot(info: FileInfo) -> Path:
    """Let huggingface_hub create the snapshot entry for the finished blob (no new download)."""
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(
        info.remote.repo,
        info.remote.filename,
        revision=info.commit,
        cache_dir=hub_cache_dir(),
        endpoint=endpoint(),
    )
    return Path(path)


def forget_cached(path: Path) -> None:
    """Delete a snapshot entry and the blob behind it (a bad file must not be reused)."""
    blob = path.resolve()
    path.unlink(missing_ok=True)
    if blob != path:
        blob.unlink(missing_ok=True)
