"""`spectui chat`: resolve the pair, then run the app until the user quits."""

from __future__ import annotations

import argparse

from spectui.session.options import options_from_args


def chat_command(args: argparse.Namespace) -> int:
    """Entry point from the CLI. A `SpectuiError` (e.g. pair not pulled) propagates to the CLI,
    which prints its one line, including the `spectui pull` command to run."""
    options = options_from_args(args)
    from spectui.ui.app import SpectuiApp

    app = SpectuiApp(options)
    result = app.run()
    return result or 0
