"""`spectui chat`: resolve the pair, then run the app until the user quits."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from spectui.session.options import options_from_args

if TYPE_CHECKING:
    from spectui.ui.app import SpectuiApp


def chat_command(args: argparse.Namespace) -> int:
    """Entry point from the CLI. A `SpectuiError` (e.g. pair not pulled) propagates to the CLI,
    which prints its one line, including the `spectui pull` command to run."""
    options = options_from_args(args)
    from spectui.ui.app import SpectuiApp

    app = SpectuiApp(options)
    app.run()
    return report_exit(app)


def report_exit(app: SpectuiApp) -> int:
    """After the app ended: repeat on stderr what the chat store said (damaged and moved aside,
    unsaved), so it stays on the terminal; an unexpected error is one line naming its log. The
    exit code is Textual's (1 after an unexpected error), never 0 after a crash."""
    for line, _severity in app.store.notices:
        print(f"spectui: {line}", file=sys.stderr)
    if app.crash_line is not None:
        print(f"spectui: {app.crash_line}", file=sys.stderr)
        return app.return_code or 1
    return app.return_code or 0
