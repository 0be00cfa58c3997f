"""The `spectui` command line.

A bare `spectui` opens the chat app. Heavy modules (llama.cpp, Textual, huggingface_hub) are
imported inside each command, so `spectui --help` and `spectui list` start instantly.
Every option is checked where it is parsed (`spectui.argtypes`, bounds in `spectui.limits`).
Nothing reaches the user as a traceback: a bad option, a `SpectuiError`, or a file or disk
problem is one line on stderr with the exit code `spectui.faults` gives it (2 for a request that
cannot be carried out as given, 1 for a fault, 128 + N for signal N); anything else is a bug,
reported as one line that names the log file holding its traceback (`spectui.crashlog`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from spectui import __version__, argtypes, faults, limits, output
from spectui.errors import SpectuiError

Command = Callable[[argparse.Namespace], int]
COMMANDS = ("chat", "bench", "serve", "pull", "list", "rm", "pair", "worker", "export", "doctor")
PAIR_HELP = "a pair from `spectui list` (default: the last pulled pair, else the demo pair)"
MODEL_REF = "a GGUF path, ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[/FILE] or hf:REPO:FILE (from the cache)"
EXIT_BROKEN_PIPE = 141  # what a shell reports for a process ended by SIGPIPE (128 + 13)

parse_k = argtypes.draft_length
parse_k_list = argtypes.draft_lengths


def parse_drafter(value: str) -> str:
    """A drafter kind from the registry, a chain of them (`model+ngram`), `auto` or `none`."""
    from spectui.engine.drafters import check_spec
    from spectui.engine.drafters.spec import DrafterSpec

    try:
        check_spec(DrafterSpec(kind=value, draft=Path("-")))
    except SpectuiError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def drafter_help() -> str:
    from spectui.engine.drafters import DEFAULT_ORDER, KINDS

    kinds = "; ".join(f"{kind.name}: {kind.summary}" for kind in KINDS.values())
    default = ", else ".join(DEFAULT_ORDER)
    return (f"what proposes tokens: auto (the default: the first the models allow of {default}; "
            "model+suffix proposes the suffix lookup's match when it is confident, for free, and the "
            f"draft model's tokens otherwise), none, {kinds}; chain a lookup before a model with +, "
            "e.g. model+ngram")


def parse_tensor_split(value: str) -> list[float]:
    """`3,1`: proportions of the target per device, workers first (in --rpc order), then GPUs."""
    try:
        shares = [float(part) for part in value.split(",") if part.strip()]
    except ValueError:
        shares = []
    if not shares or not all(math.isfinite(share) and share >= 0 for share in shares) or sum(shares) <= 0:
        raise argparse.ArgumentTypeError(f"needs non-negative shares such as 3,1, not {value!r}")
    return shares


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line: `spectui: bench --repeat: must be ..., not 0`."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("spectui").strip()
        if message.startswith("argument "):
            option, _, reason = message.removeprefix("argument ").partition(": ")
            where = f"{command} {option}".strip()
            message = f"{where}: {reason}"
        elif command:
            message = f"{command}: {message}"
        self.exit(2, f"spectui: {message} (see `{self.prog} --help`)\n")


def add_model_options(parser: argparse.ArgumentParser, max_tokens: Callable[[str], int] = argtypes.max_tokens,
                      fewest_tokens: int = 1, temperature: float | None = None) -> None:
    """Options shared by `chat` and `bench`: which models, and how to run them."""
    parser.add_argument("--target", type=argtypes.path, help=f"the target model (instead of a pair): {MODEL_REF}")
    parser.add_argument("--draft", type=argtypes.path,
                        help="the draft model, a Gemma 4 MTP assistant (mtp-*.gguf) with --drafter mtp, or an "
                        "EAGLE-3 / DFlash head made for the target (default with --target: the best one on disk, "
                        "or the target's own MTP heads)")
    parser.add_argument("--drafter", type=parse_drafter, default=None, help=drafter_help())
    add_sampling_options(parser, temperature)
    parser.add_argument("--seed", type=argtypes.seed, default=None,
                        help=f"seed for sampling, 0..{limits.MAX_SEED} (same seed, same output)")
    parser.add_argument("--max-tokens", type=max_tokens, default=None,
                        help=f"most tokens per reply ({fewest_tokens} or more)")
    parser.add_argument("--ctx", type=argtypes.context_length, default=4096,
                        help=f"context length in tokens, a multiple of {limits.CTX_STEP} (default 4096)")
    parser.add_argument("--threads", type=argtypes.threads, default=None,
                        help=f"CPU threads, 1..{limits.MAX_THREADS} (default: all cores)")
    parser.add_argument(
        "--n-gpu-layers", type=argtypes.gpu_layers, default=None,
        help="target layers to offload, -1 = all (default: all when a GPU is usable)"
    )
    parser.add_argument(
        "--draft-n-gpu-layers", type=argtypes.gpu_layers, default=None,
        help="draft layers to offload, -1 = all (default: as --n-gpu-layers)"
    )
    parser.add_argument("--rpc", type=argtypes.text, default=None, metavar="HOST:PORT[,...]",
                        help="put the target's layers on `spectui worker`s there; the draft stays here")
    parser.add_argument("--tensor-split", type=parse_tensor_split, default=None, metavar="P1,P2,...",
                        help="with --rpc: share of the target per worker (default: by their free memory)")


def add_sampling_options(parser: argparse.ArgumentParser, temperature: float | None) -> None:
    """--temperature, --top-k, --top-p, --min-p. Unset (None) means the model's recommended
    sampling (its GGUF's general.sampling.*), else llama.cpp's defaults."""
    model_default = "the model's recommendation, else llama.cpp's default"
    shown = f"{temperature:g}" if temperature is not None else f"{model_default}, 0.8"
    parser.add_argument("--temperature", type=argtypes.temperature, default=temperature,
                        help=f"sampling temperature, 0 (greedy) to {limits.MAX_TEMPERATURE:g} (default: {shown})")
    parser.add_argument("--top-k", type=argtypes.top_k, default=None,
                        help=f"keep the k likeliest tokens, 0 = off (default: {model_default}, 40)")
    parser.add_argument("--top-p", type=argtypes.probability, default=None,
                        help=f"nucleus sampling, 1 = off (default: {model_default}, 0.95)")
    parser.add_argument("--min-p", type=argtypes.probability, default=None,
                        help=f"drop tokens under min-p x the likeliest, 0 = off (default: {model_default}, 0.05)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="spectui", description="Faster local chat with llama.cpp through speculative decoding."
    )
    parser.add_argument("--version", action="version", version=f"spectui {__version__}")
    sub = parser.add_subparsers(dest="command")

    chat = sub.add_parser("chat", help="open the chat app (the default)")
    chat.add_argument("pair", nargs="?", type=argtypes.name, help=PAIR_HELP)
    add_model_options(chat)
    chat.add_argument("-k", "--draft-length", type=parse_k, default=None,
                      help=f"draft length 0..{limits.MAX_DRAFT} (0 = speculation off) or auto "
                           f"(a sure lookup may then propose up to {limits.MAX_LOOKUP_DRAFT})")
    chat.add_argument("--system", default=None, help="system prompt")
    chat.add_argument("--mode", choices=("auto", "chat", "completion"), default="auto",
                      help="chat (the model's template), completion (continue the text: base models), "
                      "or auto: chat when the GGUF has a chat template, else completion")
    chat.add_argument("--resume", action="store_true", help="reopen the last conversation")

    bench = sub.add_parser("bench", help="measure speculative vs. plain decoding, headless")
    bench.add_argument("--pair", type=argtypes.name, default=None, help=PAIR_HELP)
    add_model_options(bench, argtypes.bench_max_tokens, fewest_tokens=2, temperature=0.0)
    bench.add_argument("-k", "--draft-length", type=parse_k_list, default=None,
                       help=f"K (1..{limits.MAX_DRAFT}), `auto`, or a sweep 1,2,4,8; K=0 is the baseline, always run")
    bench.add_argument("--prompt", type=argtypes.text, action="append", default=None, help="a prompt (repeatable)")
    bench.add_argument("--repeat", type=argtypes.repeat, default=1,
                       help=f"rounds, interleaved, 1..{limits.MAX_REPEAT}; report medians (default 1)")
    bench.add_argument("--json", action="store_true", help="one JSON object per K on stdout")

    add_serve_parser(sub)

    pull = sub.add_parser("pull", help="download a target/draft pair from the Hugging Face Hub")
    pull.add_argument("pair", nargs="?", type=argtypes.name, help="a pair name from models.toml")
    pull.add_argument("--target", type=argtypes.path,
                      help="ad-hoc target: REPO:FILE, a local path or a reference (ollama:NAME...)")
    pull.add_argument("--draft", type=argtypes.path,
                      help="ad-hoc draft: REPO:FILE, a local path or a reference (ollama:NAME...)")
    pull.add_argument("--name", type=argtypes.name, help="name for an ad-hoc pair")

    listing = sub.add_parser("list", help="list catalog pairs and whether they are pulled")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.add_argument("--local", action="store_true",
                         help="models already on disk (Ollama, LM Studio, HF cache) and their automatic drafts")

    rm = sub.add_parser("rm", help="forget a pulled pair and delete files only it uses")
    rm.add_argument("pair", type=argtypes.name)

    pair = sub.add_parser("pair", help="save a pair of models already on disk under a name")
    pair_sub = pair.add_subparsers(dest="pair_action", required=True)
    add = pair_sub.add_parser("add", help="spectui pair add NAME --target REF --draft REF")
    add.add_argument("name", type=argtypes.name, help="the pair's name (then: spectui chat NAME)")
    add.add_argument("--target", type=argtypes.path, required=True, help=MODEL_REF)
    add.add_argument("--draft", type=argtypes.path, required=True, help=MODEL_REF)
    add.add_argument("--replace", action="store_true",
                     help="replace a pair of that name (files spectui downloaded for it are kept as NAME-old, "
                     "so `spectui rm NAME-old` still deletes them)")
    add.add_argument("--delete-replaced", action="store_true",
                     help="with --replace: delete the replaced pair's downloads that no other pair uses")

    from spectui.worker import add_worker_parser

    add_worker_parser(sub)

    export = sub.add_parser("export", help="write a saved chat as Markdown or JSON (without arguments: list them)")
    export.add_argument("chat_id", nargs="?", type=argtypes.chat_id, help="the chat's id (as listed)")
    export.add_argument("--last", action="store_true", help="the chat changed last (what --resume opens)")
    export.add_argument("--format", choices=("md", "json"), default=None,
                        help="md (default, or from the -o file's suffix) or json (everything stored)")
    export.add_argument("-o", "--output", type=argtypes.path, default=None,
                        help="write to this new file (default: stdout); an existing one only with --force")
    export.add_argument("--force", action="store_true", help="with -o: overwrite the file if it exists")
    export.add_argument("--repair", action="store_true",
                        help="a damaged chat store: move it aside and keep what can be read in a fresh one "
                        "(what the app does when it opens it)")

    doctor = sub.add_parser("doctor", help="what llama.cpp was built with, this machine's GPUs, and how to use them")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def add_serve_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    from spectui.serve.command import API_KEY_ENV, DEFAULT_DRAIN_SECONDS, DEFAULT_MAX_WAITING, DEFAULT_PORT

    serve = sub.add_parser("serve", help="answer OpenAI-compatible requests (other tools, editors, scripts)")
    serve.add_argument("pair", nargs="?", type=argtypes.name, help=PAIR_HELP)
    add_model_options(serve)  # the sampling options are the defaults of requests that leave them out
    serve.add_argument("-k", "--draft-length", type=parse_k, default=None,
                       help=f"draft length 0..{limits.MAX_DRAFT} (0 = speculation off) or auto (the default); "
                            "a request's `k` overrides it")
    serve.add_argument("--host", type=argtypes.text, default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; any other needs an API key)")
    serve.add_argument("--port", type=argtypes.port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument("--api-key", type=argtypes.text, default=None,
                       help=f"require `Authorization: Bearer KEY` (default: ${API_KEY_ENV}); /health stays public")
    serve.add_argument("--alias", type=argtypes.text, action="append", default=[],
                       help="the model id clients see (repeatable: the first is listed, all are answered)")
    serve.add_argument("--strict-model", action="store_true",
                       help="answer 404 to a request naming another model (default: any name, as llama-server)")
    serve.add_argument("--max-waiting", type=argtypes.waiting, default=DEFAULT_MAX_WAITING,
                       help=f"requests that may wait for the model; more get 503 (default {DEFAULT_MAX_WAITING})")
    serve.add_argument("--drain-seconds", type=argtypes.seconds, default=DEFAULT_DRAIN_SECONDS,
                       help=f"on Ctrl+C, how long replies under way may finish (default {DEFAULT_DRAIN_SECONDS:g})")
    serve.add_argument("--no-warm-up", action="store_true",
                       help="skip touching the weights and seeding K=auto before listening")


def _command(name: str) -> Command:
    """Import the command's implementation only when it runs (keeps start-up fast)."""
    if name == "serve":
        from spectui.serve.command import serve_command

        return serve_command
    if name == "chat":
        from spectui.ui.run import chat_command

        return chat_command
    if name == "bench":
        from spectui.bench import bench_command

        return bench_command
    if name == "pair":
        from spectui.catalog.local.local_commands import pair_command

        return pair_command
    if name == "worker":
        from spectui.worker import worker_command

        return worker_command
    if name == "export":
        from spectui.export import export_command

        return export_command
    if name == "doctor":
        from spectui.session.doctor import doctor_command

        return doctor_command
    from spectui.catalog import catalog_commands

    def list_command(args: argparse.Namespace) -> int:
        return catalog_commands.list_command(args, system=_system)

    return {"pull": catalog_commands.pull_command, "list": list_command, "rm": catalog_commands.rm_command}[name]


def _system() -> dict[str, object]:
    """`spectui list --json`'s `system`: what `spectui doctor --json` says."""
    from spectui.session.doctor import this_machine

    return this_machine().as_json()


def with_default_command(argv: Sequence[str]) -> list[str]:
    """A bare `spectui [chat options]` means `spectui chat [chat options]`."""
    args = list(argv)
    if args and (args[0] in COMMANDS or args[0] in ("-h", "--help", "--version")):
        return args
    return ["chat", *args]


def _check_writable(command: str) -> None:
    """`pull` and `rm` cannot work without writing the record of pulled pairs: say so first
    (before a download), naming the directory and how to choose another."""
    if command in ("pull", "rm"):
        from spectui import paths

        paths.writable_dir(paths.data_dir())


def _name_where_files_come_from() -> None:
    """A damaged model file's message names the tool that fetched it (`ollama pull NAME`, `spectui
    pull PAIR`): the catalog knows the stores, and hands that to the engine, which does not
    import it."""
    from spectui.catalog.local.origin import refetch_hint
    from spectui.engine.files import gguf_file

    gguf_file.use_refetch_hint(refetch_hint)


def main(argv: Sequence[str] | None = None) -> int:
    if not output.standard_output_open():
        return _fail(output.CLOSED_LINE)
    doing = "starting"
    try:
        with output.guarded():  # a failed write to stdout is an OutputError, not a file's
            args = _parse(build_parser(), with_default_command(sys.argv[1:] if argv is None else argv))
            doing = f"running `spectui {args.command}`"
            _check_writable(args.command)
            _name_where_files_come_from()
            code = _command(args.command)(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except SpectuiError as error:
        fault = faults.of_error(error)
        return _fail(fault.line, fault.exit_code)
    except KeyboardInterrupt:
        fault = faults.interrupted(signal.SIGINT)
        return _fail(fault.line, fault.exit_code)
    except BrokenPipeError:  # `spectui list | head -1`: the reader has all it wanted
        from spectui.crashlog import quiet_broken_pipe

        quiet_broken_pipe()
        return EXIT_BROKEN_PIPE
    except output.OutputError as error:  # `spectui doctor > /dev/full`
        from spectui.crashlog import quiet_broken_pipe

        quiet_broken_pipe()
        return _fail(error.line())
    except OSError as error:
        from spectui.crashlog import describe_os_error, report

        return _fail(describe_os_error(error) or report(error, doing))
    except Exception as error:  # a bug: one line here, the traceback in the log it names
        from spectui.crashlog import report

        return _fail(report(error, doing))


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parse_args`; after `--help` or `--version` (SystemExit 0), stdout is flushed here so a
    closed pipe (`spectui --help | head -1`) is handled like any other."""
    try:
        return parser.parse_args(argv)
    except SystemExit:
        sys.stdout.flush()
        raise


def _fail(line: str, code: int = 1) -> int:
    """The one error line, terminal-safe: it may quote a name or a path from outside."""
    from spectui.safe_text import line as safe_line

    with contextlib.suppress(OSError):  # stderr is gone (a closed terminal): the exit code still says it
        print(f"spectui: {safe_line(line)}", file=sys.stderr, flush=True)
    return code
