"""A chat samples the way people chat: the model's own recommendation, else llama.cpp's defaults.

The recommendation is read from the GGUF's `general.sampling.*` keys through llama.cpp itself
(the same keys and the same lenient parsing as llama.cpp's `common_params_sampling_from_model`),
on generated models; greedy stays one setting away, and bench keeps T = 0 for its exactness check.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
import tiny_gguf
from textual.widgets import Static
from ui_harness import RecordingApp, ready, send, shown

from spectui.cli import build_parser
from spectui.engine.drafters import DrafterSpec
from spectui.engine.generation_config import AUTO, LLAMA_CPP_SAMPLING, DraftControl, recommended_sampling
from spectui.engine.model.llama_model import LlamaModel
from spectui.session.options import ChatOptions

SIZE = (120, 40)
QWEN_LIKE = (("temp", 0.6), ("top_k", 20), ("top_p", 0.95), ("min_p", 0.0))


@pytest.fixture(scope="module")
def recommending_pair(tmp_path_factory: pytest.TempPathFactory) -> tiny_gguf.TinyPair:
    """The tiny pair, its target carrying a publisher's sampling like Qwen3's (T 0.6, top-k 20, min-p 0)."""
    spec = replace(tiny_gguf.TinySpec(), sampling=QWEN_LIKE)
    return tiny_gguf.write_pair(tmp_path_factory.mktemp("recommending"), spec=spec)


def test_the_models_own_sampling_is_read_through_llama_cpp(recommending_pair, tiny_pair) -> None:
    with LlamaModel.load(recommending_pair.target, n_ctx=0, vocab_only=True) as model:
        recommended = recommended_sampling(model.meta)
    assert recommended.from_model == ("temperature", "top_k", "top_p", "min_p")
    assert recommended.origin == "the model's"
    sampling = recommended.sampling
    # float32 in the file: 0.6 comes back as 0.6000000238...; llama.cpp hands it over as text
    assert (sampling.temperature, sampling.top_k, sampling.min_p) == (pytest.approx(0.6), 20, 0.0)
    with LlamaModel.load(tiny_pair.target, n_ctx=0, vocab_only=True) as plain:
        assert recommended_sampling(plain.meta).sampling == LLAMA_CPP_SAMPLING
        assert recommended_sampling(plain.meta).origin == "llama.cpp's defaults"


def test_values_that_do_not_parse_or_break_the_bounds_are_ignored_as_llama_cpp_does() -> None:
    meta = {"general.sampling.temp": "hot", "general.sampling.top_k": "12 (a comment)",
            "general.sampling.top_p": "1.5", "general.sampling.min_p": " 1e-2"}
    recommended = recommended_sampling(meta.get)
    assert recommended.from_model == ("top_k", "min_p")
    assert (recommended.sampling.temperature, recommended.sampling.top_k, recommended.sampling.top_p,
            recommended.sampling.min_p) == (0.8, 12, 0.95, 0.01)


def test_chat_defaults_to_the_model_and_bench_to_greedy() -> None:
    parser = build_parser()
    chat = parser.parse_args(["chat"])
    assert (chat.temperature, chat.top_k, chat.top_p, chat.min_p) == (None, None, None, None)
    assert parser.parse_args(["chat", "--temperature", "0"]).temperature == 0.0  # greedy: one setting
    assert parser.parse_args(["bench"]).temperature == 0.0  # exactness is checked at T = 0


def test_a_sampled_reply_records_the_seed_it_was_drawn_with(tiny_pair) -> None:
    options = ChatOptions("tiny", tiny_pair.target)
    first, second = (options.reply_request([], DraftControl(AUTO)) for _ in range(2))
    assert first.sampling.temperature == 0.8 and first.sampling.seed is not None
    assert first.sampling.seed != second.sampling.seed  # a fresh draw each reply...
    pinned = replace(options, seed=7).reply_request([], DraftControl(AUTO))
    assert pinned.sampling.seed == 7  # ...unless the chat pins one
    assert replace(options, temperature=0.0).reply_request([], DraftControl(AUTO)).sampling.seed is None


def test_the_app_samples_as_the_model_recommends_and_says_so(recommending_pair, spectui_home: Path) -> None:
    async def scenario() -> None:
        options = ChatOptions("tiny", recommending_pair.target, DrafterSpec(draft=recommending_pair.draft),
                              k=4, max_tokens=16, n_ctx=1024, threads=1, calibration_tokens=8)
        app = RecordingApp(options)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            header = shown(app.query_one("#settings-line", Static))
            assert header.startswith("T=0.6 top-p 0.95 top-k 20 (the model's) · seed random"), header
            await send(pilot, "Tell me about gears.")
            [finished] = app.finishes
            sampling = finished.sampling
            assert sampling is not None and sampling.top_k == 20 and sampling.seed is not None
            assert sampling.temperature == pytest.approx(0.6)
            figures = app.query_one("AssistantMessage").figures
            assert figures.sampling == f"T=0.6 top-p 0.95 top-k 20 · seed {sampling.seed}"

    asyncio.run(scenario())
