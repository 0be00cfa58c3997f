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


@pytest.fixture(scope="session")
def eos_pair(tmp_path_factory: pytest.TempPathFactory) -> tiny_gguf.TinyPair:
    """`tiny_pair`'s weights, but EOS is a token the target's greedy reply reaches early.

    Random weights rarely make the real EOS the argmax, so this pair declares as EOS the first
    token that the greedy reply to EOS_PROMPT produces for the first time at position 6 or later:
    replies end there, mid-draft for some K.
    """
    from spectui.engine.model import LlamaModel

    probe = tiny_gguf.write_pair(tmp_path_factory.mktemp("probe"))
    with LlamaModel.load(probe.target, n_ctx=256) as target:
        context = target.tokenize(EOS_PROMPT)
        reply: list[int] = []
        for _ in range(32):
            reply.append(int(target.sync(context + reply).argmax()))
    eos = next(t for i, t in enumerate(reply) if i >= 6 and t not in reply[:i])
    spec = tiny_gguf.TinySpec(eos_id=eos)
    return tiny_gguf.write_pair(tmp_path_factory.mktemp("eos"), spec=spec)


EOS_PROMPT = "Once upon a time"
