"""Which files a pair name means: `resolve_pair`, `list_pairs`, and `remove_pair` (`spectui rm`)."""

from __future__ import annotations

from pathlib import Path

from spectui.catalog import demo, record
from spectui.catalog.loader import get_entry, load_catalog
from spectui.catalog.pairs import CatalogEntry, PairStatus, ResolvedPair
from spectui.errors import CatalogError


def _first(files: list[record.PulledFile]) -> Path | None:
    return Path(files[0].path) if files else None


def resolved_from_record(name: str, pulled: record.PulledPair) -> ResolvedPair:
    return ResolvedPair(
        name, Path(pulled.target[0].path), _first(pulled.draft), pulled.recommended_k,
        drafter=pulled.drafter,
    )


def _missing_file(pulled: record.PulledPair) -> str | None:
    for file in pulled.files():
        if not Path(file.path).is_file():
            return file.path
    return None


def resolve_pair(name: str | None) -> ResolvedPair:
    """The files of a pair, ready to load.

    None means the default: the most recently pulled pair whose files are all there (a user who
    pulled a real model wants it, not the demo), else the chat demo pair (built on first use when
    the demo extra is installed; `demo-base` when only its package is there). A catalog pair that
    is not pulled raises `CatalogError` saying which `spectui pull` to run.
    """
    if name is None:
        pulled = record.read_record().pairs
        usable = [n for n in pulled if _missing_file(pulled[n]) is None]
        if usable:
            latest = max(usable, key=lambda n: pulled[n].pulled_at)
            return resolved_from_record(latest, pulled[latest])
        if (built_in := demo.default()) is not None:
            return demo.ensure_demo_pair(built_in.name)
        raise CatalogError(
            "no model pair available; run `pip install 'spectui[demo]'` for the built-in demo "
            "pair or `spectui pull qwen2.5-7b` (see `spectui list`)"
        )
    if name in demo.RECIPES:
        return demo.ensure_demo_pair(name)
    pair = record.read_record().pairs.get(name)
    if pair is None:
        get_entry(name)  # unknown names get their own message
        raise CatalogError(f"pair {name} is not pulled; run `spectui pull {name}`")
    missing = _missing_file(pair)
    if missing is not None:
        raise CatalogError(f"pair {name}: file {missing} is gone; run `spectui pull {name}` again")
    return resolved_from_record(name, pair)


def _pulled_size(pulled: record.PulledPair) -> float:
    return sum(f.size for f in pulled.files()) / 1e9


def _status(item: CatalogEntry, pulled: record.PulledPair | None) -> PairStatus:
    entry = item.entry
    if entry.source == "demo":
        return demo.status(item)
    on_disk = pulled if pulled is not None and _missing_file(pulled) is None else None
    return PairStatus(
        name=item.name, description=entry.description, source=entry.source, origin=item.origin,
        pulled=on_disk is not None,
        size_gb=_pulled_size(on_disk) if on_disk else entry.size_gb,
        recommended_k=entry.recommended_k,
        target=Path(on_disk.target[0].path) if on_disk else None,
        draft=_first(on_disk.draft) if on_disk else None, license=entry.license,
        drafter=entry.drafter,
        target_arch=(on_disk.target_arch if on_disk else None) or entry.target_arch,
    )


def _adhoc_status(name: str, pulled: record.PulledPair) -> PairStatus:
    return PairStatus(
        name=name, description=pulled.description, source="ad-hoc", origin="pulled",
        pulled=_missing_file(pulled) is None, size_gb=_pulled_size(pulled),
        recommended_k=pulled.recommended_k, target=Path(pulled.target[0].path),
        draft=_first(pulled.draft), drafter=pulled.drafter, target_arch=pulled.target_arch,
    )


def list_pairs() -> list[PairStatus]:
    """Every catalog pair (shipped and the user's), then ad-hoc pulled pairs, with status."""
    catalog = load_catalog()
    pulled = record.read_record().pairs
    rows = [_status(item, pulled.get(name)) for name, item in catalog.items()]
    rows += [_adhoc_status(name, pair) for name, pair in pulled.items() if name not in catalog]
    return rows


def remove_pair(name: str) -> list[Path]:
    """Forget a pulled pair; delete the files only it used. Returns the deleted paths."""
    if name in demo.RECIPES:
        return demo.remove(name)
    removed = record.remove_pair(name)
    if removed is None:
        raise CatalogError(f"pair {name} is not pulled; nothing to remove (see `spectui list`)")
    still_used = _files_in_use(record.read_record())
    deleted = []
    for file in removed.files():
        path = Path(file.path)
        if file.owned and path.resolve() not in still_used and _delete(path):
            deleted.append(path)
    return deleted


def _files_in_use(rec: record.PulledRecord) -> set[Path]:
    used: set[Path] = set()
    for pair in rec.pairs.values():
        for file in pair.files():
            used.add(Path(file.path).resolve())
            used.add(Path(file.path).absolute())
    return used


def _delete(path: Path) -> bool:
    """Delete a file; for a Hub cache snapshot link, the blob behind it as well."""
    if not path.exists() and not path.is_symlink():
        return False
    target = path.resolve()
    path.unlink(missing_ok=True)
    if target != path.absolute():
        target.unlink(missing_ok=True)
    return True
