"""What `spectui chat` was asked to do, as one immutable value the app and its workers share."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from spectui.engine.config import AUTO, DraftControl, DraftLength, GenerationConfig, SamplingConfig
from spectui.errors import SpectuiError

DEFAULT_MAX_TOKENS = 1024


@dataclass(frozen=True)
class ChatOptions:
    pair_name: str
    target: Path
    draft: Path | None
    k: DraftLength = AUTO
    """0 starts with speculation off (K returns to `auto` when it is turned on)."""
    temperature: float = 0.0
    seed: int | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    n_ctx: int = 4096
    threads: int | None = None
    n_gpu_layers: int | None = None
    draft_n_gpu_layers: int | None = None
    system: str | None = None
    resume: bool = False
    show_timings: bool = True
    """False replaces every timing with a placeholder (deterministic screenshots and snapshots)."""
    calibration_tokens: int = 32

    def draft_control(self) -> DraftControl:
        if self.k == 0:
            return DraftControl(AUTO, enabled=False)
        return DraftControl(self.k)

    def generation_config(self, stop: tuple[str, ...] = ()) -> GenerationConfig:
        sampling = SamplingConfig(temperature=self.temperature, seed=self.seed)
        return GenerationConfig(max_tokens=self.max_tokens, stop=stop, sampling=sampling)

    @property
    def models_label(self) -> str:
        draft = self.draft.name if self.draft else "no draft"
        return f"{self.target.name} + {draft}"


def options_from_args(args: argparse.Namespace) -> ChatOptions:
    """Resolve the pair (catalog name, demo pair, or explicit paths) and collect the options.

    Raises `CatalogError` naming the `spectui pull` command when the pair is not pulled.
    """
    if args.draft and not args.target:
        raise SpectuiError("--draft needs --target too (or name a pair: spectui chat PAIR)")
    k = args.draft_length
    if args.target:
        target, draft = Path(args.target).expanduser(), _optional_path(args.draft)
        name = "custom"
    else:
        from spectui.catalog import resolve_pair

        pair = resolve_pair(args.pair)
        target, draft, name = pair.target, pair.draft, pair.name
        k = pair.recommended_k if k is None else k
    return ChatOptions(
        pair_name=name, target=target, draft=draft, k=AUTO if k is None else k,
        temperature=args.temperature, seed=args.seed,
        max_tokens=DEFAULT_MAX_TOKENS if args.max_tokens is None else args.max_tokens,
        n_ctx=args.ctx, threads=args.threads,
        n_gpu_layers=args.n_gpu_layers, draft_n_gpu_layers=args.draft_n_gpu_layers,
        system=args.system, resume=args.resume,
    )


def _optional_path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None
