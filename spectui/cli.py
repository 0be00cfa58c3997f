"""The `spectui` command line.

A bare `spectui` opens the chat app. Heavy modules (llama.cpp, Textual, huggingface_hub) are
imported inside each command, so `spectui --help` and `spectui list` start instantly.
A `SpectuiError` is printed as one line on stderr with exit code 1, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from spectui import __version__
from spectui.errors import SpectuiError
from spectui.limits import MAX_DRAFT

Command = Callable[[argparse.Namespace], int]
COMMANDS = ("chat", "bench", "pull", "list", "rm", "pair")
PAIR_HELP = "a pair from `spectui list` (default: the last pulled pair, else the demo pair)"
MODEL_REF = "a GGUF path, ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[/FILE] or hf:REPO:FILE (from the cache)"


def parse_k(value: str) -> int | str:
    """A draft length: an integer 0..MAX_DRAFT or `auto`."""
    if value == "auto":
        return "auto"
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"draft length must be 0..{MAX_DRAFT} or 'auto', not {value!r}") from None
    if not 0 <= k <= MAX_DRAFT:
        raise argparse.ArgumentTypeError(f"draft length must be 0..{MAX_DRAFT} or 'auto', not {k}")
    return k


def parse_drafter(value: str) -> str:
    """A drafter kind from the registry, a chain of them (`model+ngram`), `auto` or `none`."""
    from spectui.engine.drafters import check_spec
    from spectui.engine.drafters.spec import DrafterSpec

    try:
        check_spec(DrafterSpec(kind=value, draft=Path("-")))
    except SpectuiError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def parse_k_list(value: str) -> list[int | str]:
    """`4`, `auto`, or a sweep such as `1,2,4,8`."""
    return [parse_k(part.strip()) for part in value.split(",") if part.strip()]


def drafter_help() -> str:
    from spectui.engine.drafters import DEFAULT_ORDER, KINDS

    kinds = "; ".join(f"{kind.name}: {kind.summary}" for kind in KINDS.values())
    default = ", else ".join(DEFAULT_ORDER)
    return (f"what proposes tokens: auto (the default: the first the models allow of {default}; "
            "model+suffix proposes the suffix lookup's match when it is confident, for free, and the "
            f"draft model's tokens otherwise), none, {kinds}; chain a lookup before a model with +, "
            "e.g. model+ngram")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `chat` and `bench`: which models, and how to run them."""
    parser.add_argument("--target", help=f"the target model (instead of a pair): {MODEL_REF}")
    parser.add_argument("--draft", help="the draft model (default with --target: the best one on disk)")
    parser.add_argument("--drafter", type=parse_drafter, default=None, help=drafter_help())
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    parser.add_argument("--seed", type=int, default=None, help="seed for sampling (same seed, same output)")
    parser.add_argument("--max-tokens", type=int, default=None, help="most tokens per reply")
    parser.add_argument("--ctx", type=int, default=4096, help="context length in tokens (default 4096)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument(
        "--n-gpu-layers", type=int, default=None, help="target layers to offload (default: all when a GPU is usable)"
    )
    parser.add_argument(
        "--draft-n-gpu-layers", type=int, default=None, help="draft layers to offload (default: as --n-gpu-layers)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spectui", description="Faster local chat with llama.cpp through speculative decoding."
    )
    parser.add_argument("--version", action="version", version=f"spectui {__version__}")
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="open the chat app (the default)")
    chat.add_argument("pair", nargs="?", help=PAIR_HELP)
    add_model_options(chat)
    chat.add_argument("-k", "--draft-length", type=parse_k, default=None, help=f"draft length 0..{MAX_DRAFT} or auto")
    chat.add_argument("--system", default=None, help="system prompt")
    chat.add_argument("--resume", action="store_true", help="reopen the last conversation")

    bench = sub.add_parser("bench", help="measure speculative vs. plain decoding, headless")
    bench.add_argument("--pair", default=None, help=PAIR_HELP)
    add_model_options(bench)
    bench.add_argument("-k", "--draft-length", type=parse_k_list, default=None, help="K, `auto`, or a sweep 1,2,4,8")
    bench.add_argument("--prompt", action="append", default=None, help="a prompt (repeatable)")
    bench.add_argument("--repeat", type=int, default=1, help="rounds, interleaved; report medians (default 1)")
    bench.add_argument("--json", action="store_true", help="one JSON object per K on stdout")

    pull = sub.add_parser("pull", help="download a target/draft pair from the Hugging Face Hub")
    pull.add_argument("pair", nargs="?", help="a pair name from models.toml")
    pull.add_argument("--target", help="ad-hoc target: REPO:FILE, a local path or a reference (ollama:NAME...)")
    pull.add_argument("--draft", help="ad-hoc draft: REPO:FILE, a local path or a reference (ollama:NAME...)")
    pull.add_argument("--name", help="name for an ad-hoc pair")

    listing = sub.add_parser("list", help="list catalog pairs and whether they are pulled")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument("--local", action="store_true",
                         help="models already on disk (Ollama, LM Studio, HF cache) and their automatic drafts")

    rm = sub.add_parser("rm", help="forget a pulled pair and delete files only it uses")
    rm.add_argument("pair")

    pair = sub.add_parser("pair", help="save a pair of models already on disk under a name")
    pair_sub = pair.add_subparsers(dest="pair_action", required=True)
    add = pair_sub.add_parser("add", help="spectui pair add NAME --target REF --draft REF")
    add.add_argument("name", help="the pair's name (then: spectui chat NAME)")
    add.add_argument("--target", required=True, help=MODEL_REF)
    add.add_argument("--draft", required=True, help=MODEL_REF)
    return parser


def _command(name: str) -> Command:
    """Import the command's implementation only when it runs (keeps start-up fast)."""
    if name == "chat":
        from spectui.ui.run import chat_command

        return chat_command
    if name == "bench":
        from spectui.bench import bench_command

        return bench_command
    if name == "pair":
        from spectui.catalog.local.commands import pair_command

        return pair_command
    from spectui.catalog import commands

    return {"pull": commands.pull_command, "list": commands.list_command, "rm": commands.rm_command}[name]


def with_default_command(argv: Sequence[str]) -> list[str]:
    """A bare `spectui [chat options]` means `spectui chat [chat options]`."""
    args = list(argv)
    if args and (args[0] in COMMANDS or args[0] in ("-h", "--help", "--version")):
        return args
    return ["chat", *args]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(with_default_command(sys.argv[1:] if argv is None else argv))
    try:
        return _command(args.command)(args)
    except SpectuiError as error:
        print(f"spectui: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("spectui: interrupted", file=sys.stderr)
        return 130
