"""Where spectui keeps its files.

Everything hangs off platformdirs' per-user directories. `SPECTUI_HOME` overrides all of them at
once (the tests point it at a temporary directory): `$SPECTUI_HOME/{config,data,models,cache}`.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "spectui"
HOME_ENV = "SPECTUI_HOME"


def _home_override() -> Path | None:
    value = os.environ.get(HOME_ENV)
    return Path(value).expanduser() if value else None


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
    """The user's `config.toml` (see `spectui.settings`)."""
    return config_dir() / "config.toml"


def local_index_path() -> Path:
    """Metadata and vocabulary fingerprints of local GGUFs, keyed by file identity."""
    return cache_dir() / "local-models.json"


def user_catalog_path() -> Path:
    return config_dir() / "models.toml"


def chats_db_path() -> Path:
    return data_dir() / "chats.sqlite3"


def pulled_record_path() -> Path:
    return data_dir() / "pulled.json"


def ensure(path: Path) -> Path:
    """Create `path` (a directory) if needed and return it."""
    path.mkdir(parents=True, exist_ok=True)
    return path
