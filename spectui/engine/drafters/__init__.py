"""Drafters: every way of proposing the tokens the target then verifies, and the one place that
knows them all.

A `DrafterSpec` says which drafter a run wants and what it needs (a draft file, or nothing); the
CLI, the catalog, bench, the memory plan and the UI pass it around. `build_drafters` turns a spec
and the loaded target into the drafters the generator holds; a kind such as `model+ngram` is a
chain of registered kinds, cheapest first.

Adding a kind: write `spectui/engine/drafters/<kind>.py` with a drafter class (see `base.Drafter`)
and a `build(spec, ctx)` function (optionally `unavailable(spec, ctx)`, and `target_options(spec,
target_path)` when the target must be loaded differently), then add one `DrafterKind(...)` line to
`KINDS` below: everything about the kind (its name, label, colour in the app, max K, what it needs
to load). Nothing else needs to know (docs/ARCHITECTURE.md, "Adding a drafter kind").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from spectui.engine.drafters.spec import AUTO_KIND, NONE_KIND, BuildContext, DrafterKind, DrafterSpec, TargetOptions
from spectui.errors import SpectuiError
from spectui.limits import MAX_DRAFT, MAX_LOOKUP_DRAFT

if TYPE_CHECKING:
    from spectui.engine.drafters.base import Drafter

__all__ = ["AUTO_KIND", "KINDS", "NONE_KIND", "BuildContext", "DrafterKind", "DrafterSpec", "build_drafters",
           "check_spec", "colour_of", "default_kind", "legend", "offered_kinds", "target_options"]

KINDS: Mapping[str, DrafterKind] = {kind.name: kind for kind in (
    DrafterKind("model", "a draft model: a smaller GGUF with the target's tokenizer (--draft)",
                label="draft model", colour="green", family="draft model", max_k=MAX_DRAFT,
                needs="draft model", rank=2, module="model"),
    DrafterKind("mtp", "MTP heads: the target's own multi-token-prediction layers, or a Gemma 4 "
                "assistant sidecar (--draft mtp-*.gguf)",
                label="MTP heads", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="nothing", rank=1, module="mtp"),
    DrafterKind("eagle3", "an EAGLE-3 head: one layer that drafts from the target's hidden states "
                "(--draft HEAD.gguf, arch eagle3)",
                label="EAGLE-3 head", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="head", rank=1, module="eagle3"),
    DrafterKind("dflash", "a DFlash head: drafts a whole block in one pass from the target's hidden states "
                "(--draft HEAD.gguf, arch dflash)",
                label="DFlash head", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="head", rank=1, module="dflash"),
    DrafterKind("ngram", "prompt lookup: what followed the last few tokens earlier in the chat (free, no draft)",
                label="n-gram lookup", colour="cyan", family="lookup", max_k=MAX_LOOKUP_DRAFT,
                needs="nothing", rank=0, module="ngram"),
    DrafterKind("suffix", "suffix decoding: the likeliest continuation from this chat and your past chats "
                "(free, no draft)",
                label="suffix lookup", colour="cyan", family="lookup", max_k=MAX_LOOKUP_DRAFT,
                needs="nothing", rank=0, module="suffix"),
)}
DEFAULT_ORDER = ("mtp", "eagle3", "dflash", "model+suffix", "model", "suffix")
"""What `auto` picks, best first (from the measurements in docs/BENCHMARKS.md). MTP heads come
first: they are part of the target, cost about one layer per token, and are only built when the
target carries them and no separate draft model was named. An EAGLE-3 or DFlash head is built
only when `--draft` names one (a head is never a draft model), and drafts alone like MTP heads.
A draft model runs behind the suffix lookup, which proposes only when its calibrated odds pay
for the verify rows."""


def kind_names() -> list[str]:
    """Every value `--drafter` accepts."""
    return [AUTO_KIND, *KINDS, NONE_KIND]


def check_spec(spec: DrafterSpec) -> None:
    """Raise a one-line `SpectuiError` for an unknown kind or a missing/extra draft file."""
    for member in spec.members:
        if member not in KINDS:
            raise SpectuiError(
                f"unknown drafter {member!r}; choose one of {', '.join(kind_names())}"
            )
    needs_file = [KINDS[m] for m in spec.members if KINDS[m].needs_draft_file]
    if needs_file and spec.draft is None:
        model = any(kind.needs == "draft model" for kind in needs_file)
        what = "a draft model" if model else f"its {needs_file[0].name} head GGUF"
        raise SpectuiError(f"--drafter {spec.kind} needs {what}: add --draft PATH (or name a pair)")


def build_drafters(spec: DrafterSpec, ctx: BuildContext) -> tuple[dict[str, Drafter], list[str]]:
    """The drafters the generator can use, by kind, and why any asked-for kind could not run.

    Every kind whose needs are met is built (cheap ones cost nothing; a draft model only when a
    draft file was given), so the user can switch between them while chatting.
    """
    check_spec(spec)
    built: dict[str, Drafter] = {}
    notes: list[str] = []
    try:
        for name, kind in KINDS.items():
            if kind.needs_draft_file and spec.draft is None:
                continue
            reason = kind.unavailable(spec, ctx)
            if reason is None:
                built[name] = kind.build(spec, ctx)
                ctx.cleanup.append(built[name])
            elif name in spec.members:
                notes.append(f"{kind.summary.split(':')[0]} is off: {reason}")
    except BaseException:
        for drafter in ctx.cleanup:
            drafter.close()
        raise
    return built, notes


def target_options(spec: DrafterSpec, target: Path) -> TargetOptions:
    """How the target must be loaded for the kinds `spec` may build (`LlamaModel.load` keyword
    arguments, e.g. `load_mtp`), asked of each kind before the target loads."""
    options: TargetOptions = {}
    for kind in KINDS.values():
        if kind.needs_draft_file and spec.draft is None:
            continue
        options |= kind.target_options(spec, target)
    return options


def default_kind(available: Iterable[str]) -> str:
    """What `auto` means with these drafters loaded."""
    have = set(available)
    for kind in DEFAULT_ORDER:
        if all(member in have for member in kind.split("+")):
            return kind
    return NONE_KIND


def offered_kinds(available: Iterable[str]) -> list[str]:
    """The kinds a user can switch between: each loaded drafter, then each lookup (rank 0) chained
    before each drafter that runs a network (`model+ngram`: the lookup is tried first)."""
    have = [name for name in KINDS if name in set(available)]
    combos = [f"{a}+{b}" for a in have for b in have if KINDS[a].rank > 0 and KINDS[b].rank == 0]
    return [*have, *combos]


def chain_order(kind: str) -> list[str]:
    """The members of a kind in the order a chain runs them: cheapest first."""
    return sorted(kind.split("+"), key=lambda name: KINDS[name].rank)


def colour_of(source: str) -> str | None:
    """The app's colour for tokens accepted from drafter `source` (None: not a registered kind)."""
    kind = KINDS.get(source)
    return kind.colour if kind is not None else None


def legend() -> list[tuple[str, str]]:
    """(colour, words) per family of kinds, in `KINDS` order: "draft model", "lookup (n-gram,
    suffix)" (each kind named by its label's first word when the family has several)."""
    families: dict[tuple[str, str], list[str]] = {}
    for kind in KINDS.values():
        families.setdefault((kind.family, kind.colour), []).append(kind.label.split()[0])
    return [(colour, family if len(names) == 1 else f"{family} ({', '.join(names)})")
            for (family, colour), names in families.items()]

