"""Shared fixtures: tiny real GGUF models generated once per session, and an isolated home."""

from __future__ import annotations

from pathlib import Path

import pytest

import tiny_gguf


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tiny_gguf.TinyPair:
    """A 4-layer target and a 1-layer draft sharing its embeddings, head and first layer."""
    return tiny_gguf.write_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def incompatible_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A draft whose vocabulary differs from `tiny_pair`'s at token 100."""
    return tiny_gguf.write_incompatible_draft(tmp_path_factory.mktemp("bad"))


@pytest.fixture
def spectui_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every spectui directory (config, data, models) at a fresh temporary folder."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPECTUI_HOME", str(home))
    return home
