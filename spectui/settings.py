"""spectui's own settings: `config.toml` in `paths.config_dir()` (`paths.settings_path()`).

A missing file means the defaults. A malformed one is one `SettingsError` line naming the file
and the field. Example::

    local_model_dirs = ["~/models", "/mnt/big/gguf"]
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spectui import paths
from spectui.errors import SettingsError


class Settings(BaseModel):
    """Everything `config.toml` may hold; unknown keys are refused (a typo must not pass)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    local_model_dirs: list[Path] = Field(default_factory=list)
    """Extra folders searched, with their subfolders, for GGUF models (`spectui list --local`,
    automatic draft pairing), besides Ollama's store, LM Studio's folders and the Hugging Face
    cache. `~` is expanded."""

    def model_dirs(self) -> list[Path]:
        return [folder.expanduser() for folder in self.local_model_dirs]


def load_settings(path: Path | None = None) -> Settings:
    """The settings in `path` (default `paths.settings_path()`); the defaults when it is absent."""
    path = path or paths.settings_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Settings()
    except OSError as error:
        raise SettingsError(f"{path}: cannot be read ({error.strerror}); fix or remove it") from None
    try:
        return Settings.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not valid TOML ({error}); fix the file or remove it") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise SettingsError(f"{path}: field {where!r}: {first['msg']}; fix the file or remove it") from None
