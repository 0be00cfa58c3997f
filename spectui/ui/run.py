"""`spectui chat`: resolve the pair, then run the app until the user quits."""

from __future__ import annotations

import argparse
import sys

from spectui.session.options import options_from_args


def chat_command(args: argparse.Namespace) -> int:
    """Entry point from the CLI. A `SpectuiError` (e.g. pair not pulled) propagates to the CLI,
    which prints its one line, including the `spectui pull` command to run.

    After the app ends, what the chat store said (damaged and moved aside, unsaved) is repeated
    on stderr so it stays on the terminal; an unexpected error is one line naming its log, and
    the exit code is then 1 (Textual's own return code), never 0."""
    options = options_from_args(args)
    from spectui.ui.app import SpectuiApp

    app = SpectuiApp(options)
    result = app.run()
    for line, _severity in app.store.notices:
        print(f"spectui: {line}", file=sys.stderr)
    if app.crash_line is not None:
        print(f"spectui: {app.crash_line}", file=sys.stderr)
        return app.return_code or 1
    return app.return_code or result or 0
