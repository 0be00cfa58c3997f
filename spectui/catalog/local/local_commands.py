"""`spectui list --local` and `spectui pair add NAME --target REF --draft REF`.

Names, paths and reasons come from other tools' stores and GGUF headers: every cell and line is
printed through `spectui.safe_text.line`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from spectui.catalog.local.discover import Discovery, LocalModel
from spectui.catalog.local.pairing import Pairing
from spectui.catalog.record import PulledFile, Replaced
from spectui.errors import CatalogError, IncompatibleDraftError, ModelLoadError
from spectui.safe_text import line


def _size(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def _params(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def model_rows(models: list[LocalModel]) -> str:
    header = ("MODEL", "SOURCE", "ARCH", "PARAMS", "QUANT", "SIZE", "CONTEXT", "MTP")
    body = [tuple(map(line, (m.reference, m.source, m.info.arch, _params(m.parameters), m.info.quantization,
                             _size(m.size), str(m.info.context_length or "?"),
                             str(m.info.mtp_layers) if m.info.mtp_layers else "-")))
            for m in models]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [header, *body])


def worth_showing(pairing: Pairing) -> bool:
    """A target with no smaller model on disk, no MTP heads and nothing to pull is left out."""
    smaller = any(not r.larger for r in pairing.refused)
    return bool(pairing.drafts or smaller or pairing.mtp_layers or pairing.suggestion)


def pairing_lines(pairing: Pairing) -> list[str]:
    lines = [pairing.target.reference]
    if pairing.mtp_layers:
        lines.append(f"  MTP heads: {pairing.mtp_layers} layer(s) in the file, no separate draft needed")
    for i, draft in enumerate(pairing.drafts):
        lines.append(f"  {'draft:' if i == 0 else '      '} {draft.describe()}")
    for refusal in pairing.refused:
        if not refusal.larger:
            lines.append(f"  refused: {refusal.model.reference}: {refusal.reason}")
    if not pairing.drafts:
        smaller = [r for r in pairing.refused if not r.larger]
        lines.append("  no compatible draft on disk" if smaller else "  no smaller model on disk")
        if pairing.suggestion:
            lines.append(f"  {pairing.suggestion}")
    return [line(text) for text in lines]


def format_local(found: Discovery, pairings: list[Pairing]) -> str:
    if not found.models:
        out = ["no GGUF language models found (Ollama, LM Studio, the Hugging Face cache, local_model_dirs)"]
    else:
        out = [model_rows(found.models), ""]
        for pairing in pairings:
            if worth_showing(pairing):
                out += pairing_lines(pairing)
    if found.skipped:
        out += ["", f"skipped {len(found.skipped)}:"]
        out += [line(f"  {p.where}: {p.reason}") for p in found.skipped]
    return "\n".join(out)


def list_local_command(args: argparse.Namespace) -> int:
    from spectui import paths
    from spectui.catalog.local.discover import discover
    from spectui.catalog.local.index import LocalIndex
    from spectui.catalog.local.pairing import pair_all

    index = LocalIndex()
    try:
        found = discover(index=index)
        pairings = pair_all(found, index)
    finally:
        index.save()
    if args.json:
        print(json.dumps({
            "models": [m.as_json() for m in found.models],
            "pairings": [p.as_json() for p in pairings],
            "skipped": [p.as_json() for p in found.skipped],
        }, indent=2))
    else:
        print(format_local(found, pairings))
        print(f"\nmore folders: local_model_dirs in {line(paths.settings_path())}; "
              "use one: spectui chat --target REF (the draft is picked automatically)")
    return 0


@dataclass(frozen=True)
class LocalPair:
    """What `pair add` recorded, and what became of a pair it replaced."""

    target: Path
    draft: Path
    replaced: Replaced | None = None
    deleted: tuple[Path, ...] = ()
    """Files of the replaced pair deleted on request (`--delete-replaced`)."""
    owned: tuple[Path, ...] = ()
    """Downloads of the replaced pair that this pair uses too: it owns them now (no download is
    orphaned, `record`), so `spectui rm NAME` deletes them."""
    warnings: tuple[str, ...] = ()
    """What makes the pair doubtful, said as `spectui chat` and `bench` say it (a large draft)."""


def add_local_pair(name: str, target_ref: str, draft_ref: str, *, replace: bool = False,
                   delete_replaced: bool = False) -> LocalPair:
    """Record a pair of files already on disk under `name` (not owned: `rm` deletes none of them).

    A recorded `name` is replaced only with `replace`; the downloads of the pair it replaces are
    kept under another name (`record.add_pair`), or deleted with `delete_replaced`, except those
    the new pair uses: it owns them from then on (`LocalPair.owned`). A draft head named as the
    target, and a draft not smaller than its target, are refused; a draft too large to pay off is
    saved with the warning `spectui chat` and `bench` give (`warnings`).
    """
    from spectui.catalog import record
    from spectui.catalog.checks import check_drafter
    from spectui.catalog.loader import load_catalog
    from spectui.catalog.local.references import resolve_reference
    from spectui.catalog.pull import check_complete, drafter_of
    from spectui.catalog.schema import PAIR_NAME, split_parts
    from spectui.engine.files.heads import check_not_a_head

    if not PAIR_NAME.match(name):
        raise CatalogError(f"pair name {name!r} must be lower case letters, digits, '.', '_', '-'")
    if delete_replaced and not replace:
        raise CatalogError("--delete-replaced goes with --replace (it deletes the replaced pair's downloads)")
    if name in load_catalog():
        raise CatalogError(f"{name} is a catalog pair; pick another name (see `spectui list`)")
    if not replace and name in record.read_record().pairs:
        raise CatalogError(f"pair {name} already exists (see `spectui list`); add --replace to replace it, "
                           "or pick another name")
    models = []
    for ref in (target_ref, draft_ref):
        first = resolve_reference(ref).absolute()
        files = [first.with_name(part) for part in split_parts(first.name)]
        models.append([record.PulledFile(path=str(f), size=check_complete(f), owned=False) for f in files])
    target, draft = Path(models[0][0].path), Path(models[1][0].path)
    drafter = drafter_of(draft)
    try:
        check_not_a_head(target)
        check_drafter(target, draft, drafter)  # the same file as target and draft included
        warnings = size_warnings(models[0], models[1], drafter)
    except (IncompatibleDraftError, ModelLoadError) as error:
        raise IncompatibleDraftError(f"pair {name} was not saved: {error}") from None
    pair = record.PulledPair(target=models[0], draft=models[1], adhoc=True, pulled_at=record.now(),
                             description=f"local pair: {target_ref} + {draft_ref}", drafter=drafter)
    replaced = record.add_pair(name, pair, replace=replace)
    deleted: tuple[Path, ...] = ()
    if replaced is not None and replaced.kept_as is not None and delete_replaced:
        from spectui.catalog.resolve import remove_pair

        deleted = tuple(remove_pair(replaced.kept_as))
    recorded = record.read_record().pairs.get(name)
    owned = tuple(Path(f.path) for f in recorded.files() if f.owned) if recorded is not None else ()
    return LocalPair(target, draft, replaced, deleted, owned, warnings)


def size_warnings(target: list[PulledFile], draft: list[PulledFile], drafter: str) -> tuple[str, ...]:
    """A draft model not smaller than its target is refused (it can only slow the target down:
    the two named the wrong way round, most likely); one larger than `spectui chat` and `bench`
    accept without a word gets their warning. A head or an MTP sidecar is sized like the layers
    it is, not like a model: nothing to say."""
    from spectui.catalog.checks import draft_size_warning

    if drafter != "model":
        return ()
    target_bytes, draft_bytes = sum(f.size for f in target), sum(f.size for f in draft)
    target_name, draft_name = Path(target[0].path).name, Path(draft[0].path).name
    if draft_bytes >= target_bytes:
        raise IncompatibleDraftError(
            f"the draft {draft_name} ({_size(draft_bytes)}) is not smaller than the target {target_name} "
            f"({_size(target_bytes)}): drafting would cost more than it saves; a draft is a much smaller "
            "model of the same family (were --target and --draft swapped?)")
    warning = draft_size_warning(draft_name, target_bytes, draft_bytes)
    return (warning,) if warning else ()


def ollama_name(ref: str) -> str | None:
    """`qwen2.5:7b` for `ollama:qwen2.5:7b`, as Ollama spells it; None for another reference."""
    from spectui.catalog.local.ollama import OllamaName

    return OllamaName.parse(ref.removeprefix("ollama:")).display if ref.startswith("ollama:") else None


def pair_command(args: argparse.Namespace) -> int:
    from spectui.catalog.local.origin import display_name

    added = add_local_pair(args.name, args.target, args.draft, replace=args.replace,
                           delete_replaced=args.delete_replaced)
    print(line(f"saved pair {args.name}"))
    for role, path, ref in (("target:", added.target, args.target), ("draft: ", added.draft, args.draft)):
        name = ollama_name(ref) or display_name(path)  # the tag given, not another sharing its blob
        print(line(f"  {role} {path}" if name == path.name else f"  {role} {name} ({path})"))
    for warning in added.warnings:
        print(f"warning: {line(warning)}", file=sys.stderr)
    if (replaced := added.replaced) is not None:
        if added.deleted:
            print(line(f"replaced pair {args.name}; deleted its downloads no other pair uses:"))
            for path in added.deleted:
                print(line(f"  deleted {path}"))
        else:
            print(line(replaced.describe()))
    if added.owned:
        files = ", ".join(str(path) for path in added.owned)
        print(line(f"run: spectui chat {args.name}   (spectui rm {args.name} forgets it and deletes {files}: "
                   "downloaded for the pair it replaced, and now this pair's own)"))
    else:
        print(line(f"run: spectui chat {args.name}   (spectui rm {args.name} forgets it and deletes no file)"))
    return 0
