"""Read the shipped `models.toml` and the user's own, and merge them (the user's entries win).

Any problem in a file becomes one `CatalogError` line naming the file, the pair and the field.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from spectui import paths
from spectui.catalog.demo import RECIPES
from spectui.catalog.pairs import CatalogEntry, Origin
from spectui.catalog.schema import Catalog
from spectui.errors import CatalogError
from spectui.user_files import read_user_text


def shipped_catalog_path() -> Path:
    """The `models.toml` inside the installed package."""
    return Path(str(resources.files("spectui").joinpath("models.toml")))


def describe_error(file: Path, error: ValidationError) -> str:
    """The first validation problem as `FILE: pair 'X', field 'a.b': message`."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    message = first["msg"].removeprefix("Value error, ")
    if loc[:1] == ["pairs"] and len(loc) >= 2:
        where = f"pair {loc[1]!r}"
        if len(loc) > 2:
            where += f", field {'.'.join(loc[2:])!r}"
    elif loc:
        where = f"field {'.'.join(loc)!r}"
    else:
        where = "top level"
    return f"{file}: {where}: {message}; fix the file or remove it"


def parse_catalog(text: str, file: Path) -> Catalog:
    """Validate one file's text; raise `CatalogError` (one line) on any problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CatalogError(f"{file}: not valid TOML ({error}); fix the file or remove it") from None
    try:
        return Catalog.model_validate(data, context={"demo_pairs": tuple(RECIPES)})
    except ValidationError as error:
        raise CatalogError(describe_error(file, error)) from None


def read_catalog(file: Path) -> Catalog:
    text = read_user_text(file, CatalogError)
    return parse_catalog(text, file)


def load_catalog(
    shipped: Path | None = None, user: Path | None = None
) -> dict[str, CatalogEntry]:
    """All pairs by name: the shipped catalog, then the user's file adding or replacing pairs."""
    shipped = shipped or shipped_catalog_path()
    user = user or paths.user_catalog_path()
    entries: dict[str, CatalogEntry] = {}
    sources: list[tuple[Path, Origin]] = [(shipped, "shipped")]
    if user.exists():
        sources.append((user, "user"))
    for file, origin in sources:
        for name, entry in read_catalog(file).pairs.items():
            entries[name] = CatalogEntry(name=name, entry=entry, origin=origin, file=file)
    return entries


def get_entry(name: str, catalog: dict[str, CatalogEntry] | None = None) -> CatalogEntry:
    """The named pair, or a `CatalogError` suggesting close names."""
    catalog = catalog if catalog is not None else load_catalog()
    if name in catalog:
        return catalog[name]
    import difflib

    close = difflib.get_close_matches(name, list(catalog), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise CatalogError(f"unknown pair {name!r}; {hint}run `spectui list` to see the pairs")
