"""What the in-process pair scripts share (probe_k_auto.py, held_cycle_cost.py,
edit_reply_cycles.py): a target and its draft named on the command line, loaded with a drafter,
and the replies' settings: llama.cpp's sampling at the temperature asked for, seeded 1."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from spectui import argtypes
from spectui.bench import workload
from spectui.engine.drafters.spec import DrafterSpec
from spectui.engine.generation_config import LLAMA_CPP_SAMPLING, GenerationConfig
from spectui.engine.generator import Generator, load_generator
from spectui.errors import SpectuiError
from spectui.session.reply import prepare


def pair_parser(description: str, *, temperature: float, tokens: int, threads: int) -> argparse.ArgumentParser:
    """A parser for TARGET DRAFT [--temperature] [--tokens] [--threads], with these defaults, each
    checked as spectui's own options are (`spectui.argtypes`: a bad value is one line, exit 2)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--temperature", type=argtypes.temperature, default=temperature)
    parser.add_argument("--tokens", type=argtypes.max_tokens, default=tokens)
    parser.add_argument("--threads", type=argtypes.threads, default=threads)
    return parser


def load_pair(args: argparse.Namespace, drafter: str = "auto") -> tuple[Generator, GenerationConfig]:
    """The pair `args` names, loaded with `drafter`, and the settings of its replies; a file that
    is missing or damaged ends the script with llama.cpp's or spectui's one line (terminal-safe)."""
    try:
        gen = load_generator(args.target, DrafterSpec(kind=drafter, draft=Path(args.draft)), n_threads=args.threads)
    except SpectuiError as error:
        raise SystemExit(f"{Path(sys.argv[0]).name}: {error}") from None
    config = GenerationConfig(max_tokens=args.tokens,
                              sampling=replace(LLAMA_CPP_SAMPLING, temperature=args.temperature, seed=1))
    return gen, config


def add_rounds(parser: argparse.ArgumentParser, *, rounds: int, prompts: str) -> None:
    """--rounds (default `rounds`) and --prompt (repeatable, instead of the script's `prompts`)."""
    parser.add_argument("--rounds", type=argtypes.repeat, default=rounds)
    parser.add_argument("--prompt", action="append", help=f"instead of the {prompts} default prompts (repeatable)")


def render(gen: Generator, config: GenerationConfig, prompts: list[str]) -> list[list[int]]:
    """Each prompt as `spectui bench` feeds it to the pair: its tokens, chat template applied."""
    work = workload(gen, prompts, config, None)
    return [prepare(gen, work.chat_format, work.request(p, i)).tokens for i, p in enumerate(prompts)]
