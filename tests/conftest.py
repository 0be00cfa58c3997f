"""Shared fixtures: tiny real GGUF models generated once per session, an isolated home, and a fake Hub
(`hub`, `tiny_on_hub`: hub_server.FakeHub serving the tiny pair)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tiny_gguf
from hub_server import DRAFT_REPO, TARGET_REPO, FakeHub, pair_toml, write_catalog


@pytest.fixture(scope="session", autouse=True)
def session_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """For every test (and every `spectui` a test starts): a bare start opens the small chat demo
    (the shipped first start, demo-wide, builds 3.7 GB; tests of that choice remove the variable),
    and spectui's directories are a temporary home unless a test asks for its own (`spectui_home`):
    no test writes into the user's real cache, such as the heads' measured speeds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECTUI_FIRST_DEMO", "demo")
        patch.setenv("SPECTUI_HOME", str(tmp_path_factory.mktemp("session-home")))
        yield


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
    from spectui.engine.model.llama_model import LlamaModel

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


@pytest.fixture
def hub(spectui_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A fake Hub; huggingface_hub pointed at it, with its cache in a temp dir and a test token."""
    server = FakeHub()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield server
    server.close()


@pytest.fixture
def tiny_on_hub(hub: FakeHub, spectui_home: Path, tiny_pair: tiny_gguf.TinyPair) -> FakeHub:
    """The tiny pair served by the fake Hub and named `tiny` in the user's catalog."""
    hub.add(TARGET_REPO, "tiny-target-f32.gguf", tiny_pair.target)
    hub.add(DRAFT_REPO, "tiny-draft-f32.gguf", tiny_pair.draft)
    write_catalog(spectui_home, pair_toml(
        "tiny", (TARGET_REPO, ["tiny-target-f32.gguf"]), (DRAFT_REPO, ["tiny-draft-f32.gguf"])
    ))
    return hub
