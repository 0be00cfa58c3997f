"""`spectui chat`: resolve the pair, then run the app until the user quits.

`--resume` without a pair or `--target` resumes with the models the last chat was recorded with
when they are still there: they are named here, before anything is resolved, so the default pair
is not built or loaded for nothing. When they are gone the default pair is resolved as usual and
the app says why the chat continues with it (`spectui.session.options.recorded_options`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spectui.errors import SpectuiError
from spectui.session.options import options_from_args

if TYPE_CHECKING:
    from spectui.ui.app import SpectuiApp


def chat_command(args: argparse.Namespace) -> int:
    """Entry point from the CLI. A `SpectuiError` (e.g. pair not pulled) propagates to the CLI,
    which prints its one line, including the `spectui pull` command to run."""
    options = None
    if args.resume and not (args.pair or args.target):
        named, notice = with_recorded_models(args)
        if notice is not None:
            with contextlib.suppress(SpectuiError):  # a record that no longer resolves: as if none
                options = replace(options_from_args(named), notice=notice)
    if options is None:
        options = options_from_args(args)
    from spectui import signals
    from spectui.ui import paste
    from spectui.ui.app import SpectuiApp

    paste.install()  # a paste holding escape sequences arrives whole (Textual's parser replays them as keys)
    app = SpectuiApp(options)
    with signals.on_bus_error(app.on_bus_error):
        app.run()
    return report_exit(app)


def report_exit(app: SpectuiApp) -> int:
    """After the app ended: repeat on stderr what the chat store said (damaged and moved aside,
    unsaved), so it stays on the terminal; an unexpected error is one line naming its log. The
    exit code is Textual's (1 after an unexpected error), never 0 after a crash, and 128 + N after
    signal N (the line says the reply in progress was saved). Nothing here may fail on a terminal
    that is gone (SIGHUP)."""
    from spectui.safe_text import line as safe_line

    lines = [line for line, _severity in app.chat.store.notices]
    lines += [line for line in (app.quit_state.quit_line, app.quit_state.crash_line) if line is not None]
    for line in lines:
        with contextlib.suppress(OSError):
            print(f"spectui: {safe_line(line)}", file=sys.stderr)
    if app.quit_state.crash_line is not None:
        return app.return_code or 1
    return app.return_code or 0


def last_chat_models() -> tuple[str, dict[str, Any]]:
    """The pair and models the last chat ran with, read without writing to the store (nothing
    when there is no store, or it predates saved models, or it cannot be read)."""
    from spectui.chat.salvage import open_readonly
    from spectui.paths import chats_db_path

    path = chats_db_path()
    if not path.is_file():
        return "", {}
    with contextlib.suppress(sqlite3.Error, OSError, ValueError):
        db = open_readonly(path)
        try:
            row = db.execute("SELECT pair, models FROM chats ORDER BY updated_at DESC, id DESC LIMIT 1").fetchone()
        finally:
            db.close()
        if row is not None:
            models = json.loads(row[1]) if row[1] else {}
            return str(row[0] or ""), models if isinstance(models, dict) else {}
    return "", {}


def with_recorded_models(args: argparse.Namespace) -> tuple[argparse.Namespace, str | None]:
    """`args` naming the last chat's models when they are available, and the line that says so."""
    pair, models = last_chat_models()
    name = str(models.get("pair") or pair or "")
    target, draft = models.get("target"), models.get("draft")
    drafter = args.drafter or models.get("drafter")
    if name and name != "custom":
        from spectui.catalog import resolve_pair

        try:
            resolve_pair(name)
        except SpectuiError:
            return args, None  # the app says why, and goes on with the default pair
        named = argparse.Namespace(**{**vars(args), "pair": name, "drafter": drafter})
    elif target and Path(target).is_file() and (not draft or Path(draft).is_file()):
        named = argparse.Namespace(**{**vars(args), "target": target, "draft": draft, "drafter": drafter})
    else:
        return args, None
    if target:
        from spectui.session.options import models_label

        return named, f"resumed with the models this chat was recorded with ({models_label(Path(target), None)})"
    return named, f"resumed with the models this chat was recorded with ({name})"
