"""`spectui pull`, `spectui list` and `spectui rm`."""

from __future__ import annotations

import argparse
import json
import sys

from spectui.catalog.resolve import PairStatus
from spectui.errors import PullError


def _note(message: str) -> None:
    print(f"spectui: {message}", file=sys.stderr, flush=True)


def pull_command(args: argparse.Namespace) -> int:
    from spectui.catalog.pull import pull_adhoc, pull_pair

    adhoc = args.target or args.draft
    if adhoc:
        if args.pair or not (args.target and args.draft and args.name):
            raise PullError(
                "an ad-hoc pull needs --target, --draft and --name together (and no pair name); "
                "e.g. spectui pull --target REPO:FILE --draft REPO:FILE --name mine"
            )
        pair = pull_adhoc(args.name, args.target, args.draft, log=_note)
    elif args.pair:
        pair = pull_pair(args.pair, log=_note)
    else:
        raise PullError("name a pair to pull (see `spectui list`) or pass --target/--draft/--name")
    print(f"pulled {pair.name}\n  target: {pair.target}\n  draft:  {pair.draft}")
    print(f"run: spectui chat {pair.name}")
    return 0


def format_table(rows: list[PairStatus]) -> str:
    """A plain table; pulled pairs get their paths on the lines below."""
    header = ("PAIR", "PULLED", "SIZE", "K", "DESCRIPTION")
    body = [
        (r.name, "yes" if r.pulled else "no", f"{r.size_gb:.1f} GB" if r.size_gb >= 0.1 else
         f"{r.size_gb * 1000:.0f} MB", str(r.recommended_k), r.description)
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(4)]
    lines = []
    for row, cells in zip([None, *rows], [header, *body], strict=True):
        padded = [c.ljust(w) for c, w in zip(cells[:4], widths, strict=True)]
        lines.append("  ".join([*padded, cells[4]]))
        if row is not None and row.pulled:
            lines.append(f"    target: {row.target}")
            lines.append(f"    draft:  {row.draft}")
    return "\n".join(lines)


def list_command(args: argparse.Namespace) -> int:
    if args.local:
        from spectui.catalog.local.commands import list_local_command

        return list_local_command(args)
    from spectui.catalog.resolve import list_pairs

    rows = list_pairs()
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
    else:
        from spectui import paths

        print(format_table(rows))
        print(f"\nadd or override pairs in {paths.user_catalog_path()}; pull one: spectui pull PAIR")
    return 0


def rm_command(args: argparse.Namespace) -> int:
    from spectui.catalog.resolve import remove_pair

    deleted = remove_pair(args.pair)
    print(f"removed {args.pair}")
    for path in deleted:
        print(f"  deleted {path}")
    if not deleted:
        print("  (its files are used by other pulled pairs or are your own; nothing deleted)")
    return 0
