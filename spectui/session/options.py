"""What `spectui chat` was asked to do, as one immutable value the app and its workers share."""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from spectui.chat.chat_settings import ChatSettings
from spectui.chat.template import ChatMessage, PromptStyle
from spectui.engine.drafters import AUTO_KIND, DrafterSpec, check_spec
from spectui.engine.generation_config import AUTO, DraftControl, DraftLength, RecommendedSampling
from spectui.errors import SpectuiError
from spectui.limits import MAX_SEED
from spectui.session.reply import ReplyRequest

DEFAULT_MAX_TOKENS = 1024
COMPLETION_MAX_TOKENS = 256
"""A base model continuing text has no end of turn: a continuation stops here unless told otherwise."""


@dataclass(frozen=True)
class ChatOptions:
    pair_name: str
    target: Path
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    """Which drafter to run and its draft file, if any."""
    k: DraftLength = AUTO
    """0 starts with speculation off (K returns to `auto` when it is turned on)."""
    temperature: float | None = None
    """None: the model's recommended sampling, else llama.cpp's defaults (T 0.8); 0 = greedy."""
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    """Most tokens per reply; None: DEFAULT_MAX_TOKENS, or COMPLETION_MAX_TOKENS for a base model."""
    mode: str = "auto"
    """`auto` (the model's chat template, else completion), `chat` or `completion`."""
    n_ctx: int = 4096
    threads: int | None = None
    n_gpu_layers: int | None = None
    rpc: str | None = None
    """`HOST:PORT[,…]`: the target's layers go to these `spectui worker`s; the drafters stay here."""
    rpc_named: str | None = None
    """`--rpc` as given on the command line: it wins over a pair's own `rpc` on every pair switch."""
    tensor_split: tuple[float, ...] | None = None
    """With `rpc`: the target's share per device (default: by the workers' free memory)."""
    system: str | None = None
    resume: bool = False
    show_timings: bool = True
    """False replaces every timing with a placeholder (deterministic screenshots and snapshots)."""
    calibration_tokens: int = 32
    notice: str | None = None
    """A line the app shows once at start (e.g. which draft was picked automatically)."""
    models_named: bool = True
    """The command line named the models (a pair or --target); False when it fell back to the
    default pair, so `--resume` may reopen the chat with the pair it was recorded with."""
    mode_named: bool = False
    """`--mode` was given (chat or completion): it wins over the mode a resumed chat was saved with."""

    def draft_control(self) -> DraftControl:
        kind = None if self.drafter.kind == AUTO_KIND else self.drafter.kind
        if self.k == 0:
            return DraftControl(AUTO, enabled=False, drafter=kind)
        return DraftControl(self.k, drafter=kind)

    def chat_settings(self) -> ChatSettings:
        """A new chat's settings from the command line (the rest at their defaults)."""
        return ChatSettings(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                            min_p=self.min_p, seed=self.seed, max_tokens=self.max_tokens)

    def reply_request(self, messages: Sequence[ChatMessage], control: DraftControl, *,
                      settings: ChatSettings | None = None, style: PromptStyle | None = None,
                      baseline_probe: int = 0, recommended: RecommendedSampling | None = None) -> ReplyRequest:
        """One chat reply as the reply core takes it: the chat's `settings` (the app's), else the
        command line's, over the model's `recommended` sampling; a continuation (`style.mode`
        completion) is shorter by default. A sampled reply without a chosen seed gets a fresh one
        here, so its figures can say which (the same seed gives the same reply)."""
        settings = settings or self.chat_settings()
        completion = style is not None and style.mode == "completion"
        default = COMPLETION_MAX_TOKENS if completion else DEFAULT_MAX_TOKENS
        max_tokens = default if settings.max_tokens is None else settings.max_tokens
        sampling = settings.sampling(recommended)
        if sampling.seed is None and not sampling.greedy:
            sampling = replace(sampling, seed=secrets.randbelow(MAX_SEED + 1))
        return ReplyRequest(messages=tuple(messages), sampling=sampling, max_tokens=max_tokens,
                            draft=control, style=style, baseline_probe=baseline_probe)

    @cached_property
    def models_label(self) -> str:
        return models_label(self.target, self.drafter.draft)

    @cached_property
    def known_names(self) -> dict[str, str]:
        """File name -> the name the user knows the model by, where they differ (an Ollama blob,
        `sha256-…`, is its Ollama name): the engine's labels name files."""
        from spectui.catalog.local.origin import display_name

        paths = [path for path in (self.target, self.drafter.draft) if path is not None]
        return {path.name: name for path in paths if (name := display_name(path)) != path.name}

    def renamed(self, label: str) -> str:
        """`label` (e.g. "draft model sha256-…") with each model file named as the user knows it."""
        for file_name, name in self.known_names.items():
            label = label.replace(file_name, name)
        return label


@dataclass(frozen=True)
class ModelChoice:
    """The models a `chat` or `bench` command line names: a pair, or explicit files."""

    pair_name: str
    target: Path
    drafter: DrafterSpec
    recommended_k: DraftLength | None = None
    notice: str | None = None
    """A line to show once (e.g. which local draft was picked automatically)."""
    rpc: str | None = None
    """The pair's own `rpc` workers from models.toml (`--rpc` wins over them)."""


def models_label(target: Path, draft: Path | None) -> str:
    """`TARGET + DRAFT` as the user knows them: file names, an Ollama model by its Ollama name
    (its blob's file name is a digest), terminal-safe."""
    from spectui.catalog.local.origin import display_name
    from spectui.safe_text import line

    return line(" + ".join(display_name(path) for path in (target, draft) if path is not None))


def models_from_args(args: argparse.Namespace) -> ModelChoice:
    """Resolve the pair (catalog name, demo pair, or explicit paths) and the drafter asked for.

    Raises `CatalogError` naming the `spectui pull` command when the pair is not pulled.
    """
    if args.draft and not args.target:
        raise SpectuiError("--draft needs --target too (or name a pair)")
    check_tensor_split(args)
    kind = args.drafter or AUTO_KIND
    if args.target:
        from spectui.catalog.local import auto_draft_for, resolve_optional, resolve_reference
        from spectui.safe_text import line

        target, draft = resolve_reference(args.target), resolve_optional(args.draft)
        notice = None
        if draft is None and wants_draft_file(kind):
            # the best compatible model or head on disk, or none when the target drafts with its own heads
            draft, notice = auto_draft_for(target, mtp_supported=mtp_supported(), kind=kind)
            print(f"spectui: {line(notice)}", file=sys.stderr)
        choice = ModelChoice("custom", target, DrafterSpec(kind, draft, args.draft_n_gpu_layers), notice=notice)
    else:
        from spectui.catalog import resolve_pair

        pair = resolve_pair(args.pair)
        spec = DrafterSpec(pair_drafter_kind(pair.drafter, kind), pair.draft, args.draft_n_gpu_layers)
        choice = ModelChoice(pair.name, pair.target, spec, pair.recommended_k, rpc=pair_rpc(pair.name))
    check_spec(choice.drafter)
    return choice


def check_tensor_split(args: argparse.Namespace) -> None:
    """`--tensor-split` shares the target between RPC workers (then this machine's GPUs): without
    `--rpc`, or a pair whose models.toml entry names workers, there is nothing to split over."""
    if not getattr(args, "tensor_split", None) or args.rpc:
        return
    if args.target or not args.pair or not pair_rpc(args.pair):
        raise SpectuiError("--tensor-split shares the target between --rpc workers; without --rpc (or a pair "
                           "with rpc workers) there is nothing to split over: add --rpc HOST:PORT[,...] or drop "
                           "--tensor-split")


def for_pair(options: ChatOptions, name: str, target: Path, draft: Path | None, kind: str,
             recommended_k: DraftLength | None) -> ChatOptions:
    """`options` switched to catalog pair `name` in a running chat: its files, its K (else the
    one in use), drafter `kind`, and the RPC workers the pair names unless --rpc named others."""
    drafter = replace(options.drafter, kind=kind, draft=draft)
    return replace(options, pair_name=name, target=target, drafter=drafter,
                   k=options.k if recommended_k is None else recommended_k,
                   rpc=options.rpc_named or pair_rpc(name))


def models_record(options: ChatOptions) -> dict[str, Any]:
    """What a chat keeps of the models it runs with (what `--resume` reopens it with)."""
    draft = options.drafter.draft
    return {"pair": options.pair_name, "target": str(options.target), "draft": str(draft) if draft else None,
            "drafter": options.drafter.kind}


CUSTOM = "custom"
"""The pair name of models given as files (`--target`/`--draft`), not a catalog pair."""


def recorded_options(options: ChatOptions, pair: str, models: dict[str, Any]) -> tuple[ChatOptions | None, str]:
    """The options to reopen a chat with its recorded models: (options, "") when they differ
    from `options` and are available, (None, why) when they are not, (None, "") when the chat
    runs with `options` anyway (the same models, or none recorded).

    `--resume` without models named on the command line reopens the last chat with the pair it
    last ran with (a catalog pair by name, other models by their files, as `models_record` kept
    them); when that pair is not available any more, `why` says so and the chat continues with
    the pair the command line resolved."""
    name = str(models.get("pair") or pair or "")
    target = models.get("target")
    if not name and not target:
        return None, ""
    if name == options.pair_name and (name != CUSTOM or str(options.target) == target):
        return None, ""
    kind = str(models.get("drafter") or options.drafter.kind)
    if name and name != CUSTOM:
        from spectui.catalog import resolve_pair

        try:
            resolved = resolve_pair(name)
        except SpectuiError as error:
            return None, unavailable(f"pair {name}", str(error), options)
        return for_pair(options, name, resolved.target, resolved.draft, kind, resolved.recommended_k), ""
    if not target:
        return None, ""
    target_path = Path(str(target))
    draft_path = Path(str(models["draft"])) if models.get("draft") else None
    files = [target_path, *([draft_path] if draft_path else [])]
    if (missing := next((f for f in files if not f.is_file()), None)) is not None:
        named = models_label(target_path, draft_path)
        return None, unavailable(named, f"{missing} is not there any more", options)
    spec = DrafterSpec(kind, draft_path, options.drafter.draft_n_gpu_layers)
    return replace(options, pair_name=CUSTOM, target=target_path, drafter=spec, rpc=options.rpc_named), ""


def unavailable(what: str, why: str, options: ChatOptions) -> str:
    return (f"this chat was recorded with {what}, which is not available now ({why}); "
            f"it continues with {options.models_label}")


def pair_rpc(name: str) -> str | None:
    """The `rpc` a catalog pair names in models.toml (None for the demo and ad-hoc pairs)."""
    from spectui.catalog.loader import load_catalog

    entry = load_catalog().get(name)
    return None if entry is None else entry.entry.rpc


def wants_draft_file(kind: str) -> bool:
    """`auto`, or a kind with a member that drafts from a file (`model`, `eagle3`, `dflash`)."""
    from spectui.engine.drafters import KINDS

    return kind == AUTO_KIND or any(KINDS[m].needs_draft_file for m in kind.split("+") if m in KINDS)


def pair_drafter_kind(pair_drafter: str, asked: str) -> str:
    """The drafter kind for a catalog pair: what `--drafter` asked for, else the pair's own for an
    MTP pair (its heads, or its assistant sidecar) or an EAGLE-3 / DFlash head, else `auto`."""
    if asked != AUTO_KIND:
        return asked
    return pair_drafter if pair_drafter in ("mtp", "eagle3", "dflash", "dspark", "dflash2") else AUTO_KIND


def mtp_supported() -> bool:
    """Whether the installed llama-cpp-python can draft with MTP heads."""
    from spectui.engine.drafters.mtp_context import missing_support

    return missing_support() is None


def options_from_args(args: argparse.Namespace) -> ChatOptions:
    """The chat's options from its command line."""
    choice = models_from_args(args)
    k = args.draft_length if args.draft_length is not None else choice.recommended_k
    return ChatOptions(
        pair_name=choice.pair_name, target=choice.target, drafter=choice.drafter,
        k=AUTO if k is None else k, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        min_p=args.min_p, seed=args.seed,
        max_tokens=args.max_tokens, mode=args.mode, n_ctx=args.ctx, threads=args.threads,
        n_gpu_layers=args.n_gpu_layers, rpc=args.rpc or choice.rpc, rpc_named=args.rpc,
        tensor_split=tuple(args.tensor_split) if args.tensor_split else None,
        system=args.system, resume=args.resume, notice=choice.notice,
        models_named=bool(args.pair or args.target), mode_named=args.mode != "auto",
    )
