"""Where spectui keeps its files.

Everything hangs off platformdirs' per-user directories. `SPECTUI_HOME` overrides all of them at
once (the tests point it at a temporary directory): `$SPECTUI_HOME/{config,data,models,cache,logs}`.
A directory that cannot be written (a read-only mount, a file where it should be) is reported by
`writable_dir` as one `StorageError` line that says how to choose another home.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import platformdirs

from spectui.errors import StorageError

APP_NAME = "spectui"
HOME_ENV = "SPECTUI_HOME"


def _home_override() -> Path | None:
    value = os.environ.get(HOME_ENV)
    if not value:
        return None
    try:
        return Path(value).expanduser()
    except RuntimeError:  # `~someone` for a user that does not exist
        raise StorageError(f"{HOME_ENV}={value}: the ~ in it names no user here; "
                           f"give the full path, e.g. {HOME_ENV}=$HOME/spectui") from None


def config_dir() -> Path:
    """Holds the user's own `models.toml`."""
    home = _home_override()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Holds the chat database and the record of pulled pairs."""
    home = _home_override()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME))


def models_dir() -> Path:
    """Holds model files spectui builds itself (the demo pair) or links from the Hub cache."""
    home = _home_override()
    return home / "models" if home else Path(platformdirs.user_cache_dir(APP_NAME)) / "models"


def cache_dir() -> Path:
    """Holds what spectui can rebuild at any time (the index of models found on disk)."""
    home = _home_override()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME))


def settings_path() -> Path:
    """The user's `config.toml` (see `spectui.config_file`)."""
    return config_dir() / "config.toml"


def local_index_path() -> Path:
    """Metadata and vocabulary fingerprints of local GGUFs, keyed by file identity."""
    return cache_dir() / "local-models.json"
def log_dir() -> Path:
    """Holds the logs of unexpected errors (the full traceback the one-line message points to)."""
    home = _home_override()
    return home / "logs" if home else Path(platformdirs.user_state_dir(APP_NAME)) / "logs"


def user_catalog_path() -> Path:
    return config_dir() / "models.toml"


def chats_db_path() -> Path:
    return data_dir() / "chats.sqlite3"


def pulled_record_path() -> Path:
    return data_dir() / "pulled.json"


def ensure(path: Path) -> Path:
    """Create `path` (a directory) if needed and return it; `StorageError` when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StorageError(unwritable(path, error)) from None
    if not path.is_dir():
        raise StorageError(unwritable(path, OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))))
    return path


def writable_dir(path: Path) -> Path:
    """`ensure(path)`, then prove a file can be created in it (a read-only mount lets the
    directory exist but refuses every write); `StorageError` names it and the way out."""
    ensure(path)
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise StorageError(unwritable(path, error)) from None
    return path


def unwritable(path: Path, error: OSError) -> str:
    """One line: which directory, why, and how to choose another (SPECTUI_HOME)."""
    reason = error.strerror or str(error)
    return (f"cannot write to {path} ({reason}); make it writable, or choose another directory: "
            f"{HOME_ENV}=/some/dir spectui ...")
