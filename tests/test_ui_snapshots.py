"""Snapshots of the main screen at a fixed size (pytest-textual-snapshot).

Timings vary run to run, so these apps run with `show_timings=False`: every tokens/sec figure,
the speedup, the speed sparkline and the baseline's clock time show as placeholders, while the
layout, the K, the acceptance and the baseline's description stay real. The screens shown are
ones whose text is fixed: a fresh screen after load, a stored chat reopened with --resume, the
settings screen, a reasoning reply from a scripted model (its thinking folded), and three lines
typed into the message box.
Update with `pytest tests/test_ui_snapshots.py --snapshot-update` after a deliberate change.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import scripted_gguf
from textual.pilot import Pilot

from spectui.chat.store import ChatStore
from spectui.engine.drafters import DrafterSpec
from spectui.paths import chats_db_path
from spectui.session.options import ChatOptions
from spectui.ui.app import SpectuiApp

SIZE = (120, 36)
STORED_REPLY = """Here is a loop:

```python
for gear in range(1, 4):
    print(f"gear {gear}")
```

Each **gear** changes the ratio."""


def frozen_options(pair, **overrides: object) -> ChatOptions:
    values: dict[str, object] = dict(
        pair_name="tiny", target=pair.target, drafter=DrafterSpec(draft=pair.draft), k=4, max_tokens=24, n_ctx=1024,
        temperature=0.0,
        threads=1, show_timings=False,
    )
    values.update(overrides)
    return ChatOptions(**values)  # type: ignore[arg-type]


async def until_ready(pilot: Pilot) -> None:
    deadline = time.monotonic() + 60
    while not pilot.app.pair.ready and time.monotonic() < deadline:
        await pilot.pause(0.05)
    pilot.app.clear_notifications()
    still(pilot.app)
    await pilot.pause(0.1)


def test_main_screen_after_load(snap_compare, tiny_pair, spectui_home: Path) -> None:
    app = SpectuiApp(frozen_options(tiny_pair))
    assert snap_compare(app, terminal_size=SIZE, run_before=until_ready)


def test_main_screen_with_a_resumed_chat(snap_compare, tiny_pair, spectui_home: Path) -> None:
    store = ChatStore(chats_db_path())
    chat = store.new_chat("tiny")
    store.add_message(chat, "user", "Show me a loop over gears.")
    stats = {"reason": "eos", "tokens": 42, "drafted": 40, "acceptance": 0.75,
             "mean_accepted": 2.5, "tps": 88.0, "k": "4"}
    store.add_message(chat, "assistant", STORED_REPLY, stats=stats)
    store.add_message(chat, "user", "And then?")
    store.add_message(chat, "assistant", "The chain mov", complete=False)
    store.close()
    app = SpectuiApp(frozen_options(tiny_pair, resume=True))
    assert snap_compare(app, terminal_size=SIZE, run_before=until_ready)


# ----- the everyday chat (#14): the settings screen, a folded thinking block, the multi-line box -----


@pytest.fixture(scope="module")
def thinking_pair(tmp_path_factory: pytest.TempPathFactory):
    return scripted_gguf.write_scripted_pair(tmp_path_factory.mktemp("thinking"))


def still(app: SpectuiApp) -> None:
    """No blinking cursors: a snapshot must not depend on when it is taken."""
    for widget in app.screen.query("Input, TextArea"):
        widget.cursor_blink = False  # type: ignore[attr-defined]


async def settings_open(pilot: Pilot) -> None:
    await until_ready(pilot)
    await pilot.press("ctrl+s")
    await pilot.pause(0.3)
    still(pilot.app)
    await pilot.pause(0.1)


async def reasoning_reply(pilot: Pilot) -> None:
    await until_ready(pilot)
    app = pilot.app
    app.pair.load_meter.others = lambda: None  # no baseline probe (K=0 cycles) when other programs get busy
    app.prompt.load_text("How many gears?")
    await pilot.press("enter")
    deadline = time.monotonic() + 60
    while (app.replies.busy is not None or not app.chat.conversation.messages[1:]) and time.monotonic() < deadline:
        await pilot.pause(0.05)
    app.clear_notifications()
    still(app)
    await pilot.pause(0.2)


async def three_lines_typed(pilot: Pilot) -> None:
    await until_ready(pilot)
    await pilot.press(*"First line", "ctrl+j", *"second line", "ctrl+j", *"third line")
    still(pilot.app)
    await pilot.pause(0.1)


def test_settings_screen(snap_compare, tiny_pair, spectui_home: Path) -> None:
    app = SpectuiApp(frozen_options(tiny_pair, temperature=0.8, seed=7, system="Be brief."))
    assert snap_compare(app, terminal_size=SIZE, run_before=settings_open)


def test_a_reasoning_reply_with_its_thinking_folded(snap_compare, thinking_pair, spectui_home: Path) -> None:
    app = SpectuiApp(frozen_options(thinking_pair))
    assert snap_compare(app, terminal_size=SIZE, run_before=reasoning_reply)


def test_a_message_of_three_lines_in_the_message_box(snap_compare, tiny_pair, spectui_home: Path) -> None:
    app = SpectuiApp(frozen_options(tiny_pair))
    assert snap_compare(app, terminal_size=SIZE, run_before=three_lines_typed)
