"""`EngineSession`, the one owner of a loaded pair (#37): it plans, loads, calibrates through the
reply core, replies, checks and frees; and the chat app, `spectui serve` and `spectui bench` all
load through it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tiny_gguf
from serving import served
from ui_harness import SIZE, RecordingApp, options, ready, run_async, send

from spectui.chat.template import ChatMessage
from spectui.cli import main
from spectui.engine.drafters import DrafterSpec
from spectui.engine.generation_config import SamplingConfig
from spectui.session import baseline
from spectui.session.loaded import EngineSession, NotLoaded
from spectui.session.pair_load import LoadedPair, LoadPlan, LoadReport, LoadSpec
from spectui.session.reply import ReplyEvent, ReplyRequest, final

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture
def pair(tiny_pair: tiny_gguf.TinyPair, spectui_home: Path) -> tiny_gguf.TinyPair:
    return tiny_pair


def spec(pair: tiny_gguf.TinyPair, **changes: Any) -> LoadSpec:
    values: dict[str, Any] = dict(target=pair.target, drafter=DrafterSpec(draft=pair.draft), n_ctx=1024, threads=1)
    values.update(changes)
    return LoadSpec(**values)


def test_one_session_loads_calibrates_through_the_reply_core_replies_checks_and_closes(
    pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    calibration_replies: list[ReplyRequest] = []
    real = baseline.run_reply

    def recorded(generator: Any, chat_format: Any, request: ReplyRequest,
                 cancelled: Callable[[], bool]) -> Iterator[ReplyEvent]:
        calibration_replies.append(request)
        return real(generator, chat_format, request, cancelled)

    monkeypatch.setattr(baseline, "run_reply", recorded)
    said: list[str] = []
    session = EngineSession()
    plan = session.plan(spec(pair, calibration_tokens=8))
    assert plan.threads == 1 and plan.threads_note is None  # threads given: none chosen, none said
    report = LoadReport(progress=lambda fraction: said.append("progress") is None,
                        loaded=lambda loaded: said.append(f"loaded {loaded.mode}"),
                        calibrating=lambda: said.append("calibrating"))
    loaded = session.load(plan, report)
    assert loaded is not None and session.generator is not None and session.chat_format is not None
    assert said[0] == "progress" and said[-2:] == [f"loaded {loaded.mode}", "calibrating"]
    assert loaded.n_ctx == 1024 and loaded.drafters.can_speculate and loaded.template
    # the calibration: first touch (K=2), K = auto warmed, the baseline at K = 0 -- each a reply
    # through the reply core, on the prompt's tokens as they are, greedy
    assert [r.draft.effective_k() for r in calibration_replies] == [2, "auto", 0]
    assert all(isinstance(r.prompt, tuple) and r.sampling.temperature == 0.0 for r in calibration_replies)
    assert calibration_replies[-1].max_tokens == 8 + 1
    assert loaded.calibration is not None and loaded.calibration.baseline is not None
    assert loaded.calibration.baseline.source == "calibration after load"

    request = ReplyRequest(messages=(ChatMessage("user", "Hello"),), sampling=GREEDY, max_tokens=6)
    built: list[object] = []
    done = final(session.reply_to(lambda generator: built.append(generator) or request))
    assert built == [session.generator]  # the request is made from the loaded generator, under the lock
    assert done.tokens == final(session.reply(request)).tokens  # the same reply either way (greedy)
    health = session.check_health()
    assert health.fault is None and health.removed == ()
    assert session.close()
    assert session.generator is None and session.chat_format is None
    with pytest.raises(NotLoaded):
        final(session.reply(request))


def test_a_load_without_calibration_and_one_cancelled_after_the_files(pair) -> None:
    session = EngineSession()
    loaded = session.load(session.plan(spec(pair)))
    assert loaded is not None and loaded.calibration is None  # bench's: no calibration
    assert session.load(session.plan(spec(pair)), cancelled=lambda: True) is None
    assert session.generator is None  # the pair loaded before was freed, the new one too
    assert session.close()


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[LoadSpec]:
    """Every `EngineSession.load`'s spec, whoever calls it."""
    seen: list[LoadSpec] = []
    real = EngineSession.load

    def load(self: EngineSession, plan: LoadPlan, report: LoadReport | None = None,
             cancelled: Callable[[], bool] = lambda: False) -> LoadedPair | None:
        seen.append(plan.spec)
        return real(self, plan, report, cancelled)

    monkeypatch.setattr(EngineSession, "load", load)
    return seen


def test_bench_loads_through_the_session(pair, loads, capsys) -> None:
    assert main(["bench", "--target", str(pair.target), "--draft", str(pair.draft), "--threads", "1",
                 "--max-tokens", "8", "--prompt", "Hi", "-k", "2"]) == 0
    [load] = loads
    assert load.target == pair.target and load.calibration_tokens is None and load.threads == 1


def test_serve_loads_through_the_session(pair, loads) -> None:
    with served(pair.target, pair.draft) as server:
        reply = server.client().chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                                        max_tokens=4, temperature=0)
        assert reply.choices[0].message.content is not None
    [load] = loads
    assert load.mode == "chat" and load.calibration_tokens is None  # --no-warm-up
    assert isinstance(server.state.slot.session, EngineSession)


def test_serve_warms_up_through_the_session_unless_told_not_to(pair) -> None:
    from spectui.cli import build_parser
    from spectui.serve.command import WARM_UP_TOKENS, prepare

    args = build_parser().parse_args(["serve", "--target", str(pair.target), "--draft", str(pair.draft),
                                      "--threads", "1", "--ctx", "1024"])
    loading = prepare(args, None)
    try:
        assert loading.plan.spec.calibration_tokens == WARM_UP_TOKENS
    finally:
        loading.slot.close(timeout=5.0)


@run_async
async def test_the_chat_app_loads_through_the_session(pair, loads) -> None:
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "Hello")
    [load] = loads
    assert load.mode == "auto" and load.calibration_tokens == 8 and load.history is not None
