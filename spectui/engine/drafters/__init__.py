"""Drafters: every way of proposing the tokens the target then verifies, and the one place that
knows them all.

A `DrafterSpec` says which drafter a run wants and what it needs (a draft file, or nothing); the
CLI, the catalog, bench, the memory plan and the UI pass it around. `build_drafters` turns a spec
and the loaded target into the drafters the generator holds; a kind such as `model+ngram` is a
chain of registered kinds, cheapest first.

Adding a kind: write `spectui/engine/drafters/<kind>.py` with a drafter class (see `base.Drafter`)
and a `build(spec, ctx)` function (optionally `unavailable(spec, ctx)`, and `target_options(spec,
target_path)` when the target must be loaded differently), then add one `DrafterKind(...)` line to
`KINDS` in `kinds.py`: everything about the kind (its name, label, colour in the app, max K, what it needs
to load). Nothing else needs to know (docs/ARCHITECTURE.md, "Adding a drafter kind").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.spec import AUTO_KIND, NONE_KIND, BuildContext, DrafterKind, DrafterSpec, TargetOptions
from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from spectui.engine.step.drafter import Drafter

__all__ = ["AUTO_KIND", "KINDS", "NONE_KIND", "BuildContext", "DrafterKind", "DrafterSpec", "build_drafters",
           "check_spec", "colour_of", "default_kind", "legend", "offered_kinds", "target_options"]

DEFAULT_ORDER = ("mtp", "dspark", "dflash2", "dflash", "eagle3", "model+suffix", "model", "suffix")
"""What `auto` picks, best first (from the measurements in docs/BENCHMARKS.md). MTP heads come
first: they are part of the target, cost about one layer per token, and are only built when the
target carries them and no separate draft model was named. An EAGLE-3 or DFlash head is built
only when `--draft` names one (a head is never a draft model), and drafts alone like MTP heads.
A draft model runs behind the suffix lookup, which proposes only when its calibrated odds pay
for the verify rows. Among heads, llama-server's order (mtp > dspark > dflash > eagle3; DFlash2
beside DFlash) only breaks ties: one `--draft` names one head, so one head kind is ever built, and
where several heads on disk fit a target, `auto` picks the file measured fastest on this machine
(`spectui.catalog.local.head_speeds`, measured by each load's calibration)."""


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
            reason = _unavailable(kind, spec, ctx)
            if reason is None:
                built[name] = _build(kind, spec, ctx)
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
        options |= _target_options(kind, spec, target)
    return options


def _module(kind: DrafterKind) -> ModuleType:
    """The kind's module (in this package), imported only when a drafter is built or the target's
    load asks, so listing kinds (`--help`) stays instant. It defines `build(spec, ctx) ->
    Drafter` and may define `unavailable(spec, ctx) -> str | None` (why these models cannot run
    it) and `target_options(spec, target_path) -> TargetOptions` (keyword arguments for
    `LlamaModel.load` of the target, asked before it loads: MTP heads need `load_mtp`)."""
    return importlib.import_module(f"spectui.engine.drafters.{kind.module}")


def _build(kind: DrafterKind, spec: DrafterSpec, ctx: BuildContext) -> Drafter:
    build: Callable[[DrafterSpec, BuildContext], Drafter] = _module(kind).build
    drafter = build(spec, ctx)
    if drafter.source != kind.name or drafter.max_k > kind.max_k:
        drafter.close()
        raise ValueError(f"drafter kind {kind.name!r} built a drafter with source {drafter.source!r} "
                         f"and max_k {drafter.max_k}: its kind says {kind.name!r}, at most {kind.max_k}")
    return drafter


def _unavailable(kind: DrafterKind, spec: DrafterSpec, ctx: BuildContext) -> str | None:
    check: Callable[[DrafterSpec, BuildContext], str | None] | None = getattr(_module(kind), "unavailable", None)
    return check(spec, ctx) if check is not None else None


def _target_options(kind: DrafterKind, spec: DrafterSpec, target: Path) -> TargetOptions:
    hook: Callable[[DrafterSpec, Path], TargetOptions] | None = getattr(_module(kind), "target_options", None)
    return hook(spec, target) if hook is not None else {}


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

