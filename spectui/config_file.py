"""spectui's own settings: `config.toml` in `paths.config_dir()` (`paths.settings_path()`).

A missing file means the defaults. A malformed one is one `SettingsError` line naming the file
and the field, and what to write instead. Example::

    local_model_dirs = ["~/models", "/mnt/big/gguf"]
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from spectui import paths
from spectui.errors import SettingsError
from spectui.user_files import read_user_text


class Settings(BaseModel):
    """Everything `config.toml` may hold; unknown keys are refused (a typo must not pass)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    local_model_dirs: list[Path] = Field(default_factory=list)
    """Extra folders searched, with their subfolders, for GGUF models (`spectui list --local`,
    automatic draft pairing), besides Ollama's store, LM Studio's folders and the Hugging Face
    cache. Absolute, or starting with `~` (expanded); a relative path is refused, since it would
    mean another folder from every directory spectui is started in."""

    @field_validator("local_model_dirs", mode="after")
    @classmethod
    def _absolute_folders(cls, folders: list[Path]) -> list[Path]:
        for folder in folders:
            expand_folder(folder)
        return folders

    def model_dirs(self) -> list[Path]:
        return [expand_folder(folder) for folder in self.local_model_dirs]


def expand_folder(folder: Path) -> Path:
    """`folder` with `~` expanded; `ValueError` (one line saying what to write) when `~user` names
    no user or the path is relative."""
    try:
        expanded = folder.expanduser()
    except RuntimeError:
        user = str(folder).split("/")[0]
        raise ValueError(f"{str(folder)!r}: {user} names no user here; write the folder's full path "
                         "(e.g. '/home/me/models') or '~/models' for your own home") from None
    if not expanded.is_absolute():
        raise ValueError(f"{str(folder)!r} is a relative path (it would change with the folder spectui "
                         f"starts in); write it in full, e.g. '{Path.home() / folder}'")
    return expanded


def load_settings(path: Path | None = None) -> Settings:
    """The settings in `path` (default `paths.settings_path()`); the defaults when it is absent."""
    path = path or paths.settings_path()
    text = read_user_text(path, SettingsError, missing_ok=True)
    if text is None:
        return Settings()
    try:
        return Settings.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not valid TOML ({error}); fix the file or remove it") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        message = first["msg"].removeprefix("Value error, ")
        raise SettingsError(f"{path}: field {where!r}: {message}; fix the file or remove it") from None
