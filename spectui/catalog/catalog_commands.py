"""`spectui pull`, `spectui list` and `spectui rm`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from spectui.catalog.pairs import PairStatus
from spectui.errors import PullError
from spectui.safe_text import block, line


def _note(message: str) -> None:
    print(f"spectui: {line(message)}", file=sys.stderr, flush=True)


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
    print(block(f"pulled {pair.name}\n  target: {line(pair.target)}\n  {line(_draft_line(pair.drafter, pair.draft))}"))
    print(f"run: spectui chat {pair.name}")
    return 0


def _draft_line(drafter: str, draft: object) -> str:
    if drafter == "mtp":
        return f"mtp:    {draft}" if draft else "mtp:    the target's own MTP heads"
    if drafter in ("eagle3", "dflash", "dspark", "dflash2"):
        return f"head:   {draft}"
    return f"draft:  {draft}"


def _size(size_gb: float) -> str:
    return f"{size_gb:.1f} GB" if size_gb >= 0.1 else f"{size_gb * 1000:.0f} MB"


def _hybrid(row: PairStatus) -> str:
    return {True: "yes", False: "no", None: "?"}[row.hybrid]


def format_table(rows: list[PairStatus]) -> str:
    """A plain table; pulled pairs get their paths on the lines below.

    DRAFTER is `model` (a draft GGUF), `mtp` (MTP heads or an MTP assistant) or `eagle3` /
    `dflash` / `dspark` / `dflash2` (a head that reads the target's hidden states); HYBRID says
    whether the target mixes recurrent and attention layers (`?`: architecture unknown).
    """
    header = ("PAIR", "PULLED", "SIZE", "K", "DRAFTER", "HYBRID", "DESCRIPTION")
    body = [
        (line(r.name), "yes" if r.pulled else "no", _size(r.size_gb), str(r.recommended_k), r.drafter,
         _hybrid(r), line(r.description))
        for r in rows
    ]
    n_padded = len(header) - 1
    widths = [max(len(cells[i]) for cells in [header, *body]) for i in range(n_padded)]
    lines = []
    for row, cells in zip([None, *rows], [header, *body], strict=True):
        padded = [c.ljust(w) for c, w in zip(cells[:n_padded], widths, strict=True)]
        lines.append("  ".join([*padded, cells[n_padded]]))
        if row is not None and row.pulled:
            lines.append(f"    target: {line(row.target)}")
            lines.append(f"    {line(_draft_line(row.drafter, row.draft))}")
    return "\n".join(lines)


def list_command(args: argparse.Namespace, system: Callable[[], dict[str, object]]) -> int:
    """`system`: what `spectui doctor --json` says (llama.cpp's build, devices, this machine's
    GPUs), asked only for `--json`; the command line passes it in (doctor is a session's, above
    the catalog)."""
    if args.local:
        from spectui.catalog.local.local_commands import list_local_command

        return list_local_command(args)
    from spectui.catalog.resolve import list_pairs

    rows = list_pairs()
    if args.json:
        print(json.dumps({"pairs": [row.as_json() for row in rows], "system": system()}, indent=2))
    else:
        from spectui import paths

        print(format_table(rows))
        print(f"\nadd or override pairs in {line(paths.user_catalog_path())}; pull one: spectui pull PAIR")
    return 0


def rm_command(args: argparse.Namespace) -> int:
    from spectui.catalog.resolve import remove_pair

    deleted = remove_pair(args.pair)
    print(f"removed {line(args.pair)}")
    for path in deleted:
        print(f"  deleted {line(path)}")
    if not deleted:
        print("  (its files are used by other pulled pairs or are your own; nothing deleted)")
    return 0
