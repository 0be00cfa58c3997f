"""`pull_pair`: download a catalog pair, check it, and record it as pulled.

The order matters: look up every file first (sizes, gates, typos fail before any byte moves),
check free disk space, download, then check each file is a complete GGUF and that the drafter
fits the target (`checks.check_drafter`: the draft shares the target's tokenizer; an MTP target
really carries MTP heads; an MTP sidecar is an assistant made for this target). Only a pair
that passes everything is recorded as pulled.

Only the files a catalog entry or `REPO:FILE` names are fetched: no repo is ever listed or
globbed, so the `mmproj-*.gguf` vision projectors beside a model are never downloaded.
"""

from __future__ import annotations

from pathlib import Path

from spectui.catalog import hub, record
from spectui.catalog.hub import FileInfo, Log, RemoteFile
from spectui.catalog.loader import get_entry
from spectui.catalog.pairs import ResolvedPair
from spectui.catalog.resolve import resolved_from_record
from spectui.catalog.schema import REPO_ID, ModelFiles, is_projector, split_parts
from spectui.errors import IncompatibleDraftError, ModelLoadError, PullError, SpectuiError


def pull_pair(name: str, *, tqdm_class: type | None = None, log: Log | None = None) -> ResolvedPair:
    """Download (or build, for `demo`) the named pair and record it as pulled.

    `tqdm_class` is handed to huggingface_hub for the per-file progress bars; `log` receives
    one-line notes (file already cached, checks running).
    """
    entry = get_entry(name).entry
    if entry.source == "demo":
        from spectui.catalog import demo

        return demo.ensure_demo_pair(name, log=log)
    assert entry.target is not None
    target = _remote_files(entry.target)
    draft = _remote_files(entry.draft) if entry.draft is not None else []
    infos = [hub.inspect(remote) for remote in [*target, *draft]]
    hub.check_free_space(hub.bytes_needed(infos))
    files = [(info, hub.fetch(info, tqdm_class=tqdm_class, log=log)) for info in infos]
    pulled_target = [_verify(info, path) for info, path in files[: len(target)]]
    pulled_draft = [_verify(info, path) for info, path in files[len(target) :]]
    pulled = record.PulledPair(
        target=pulled_target, draft=pulled_draft, drafter=entry.drafter,
        recommended_k=entry.recommended_k, description=entry.description,
    )
    return _check_and_record(name, pulled, log=log)


def pull_adhoc(
    name: str, target: str, draft: str, *, tqdm_class: type | None = None, log: Log | None = None
) -> ResolvedPair:
    """An ad-hoc pair from `REPO:FILE` specs or local paths, recorded under `name`."""
    from spectui.catalog.schema import PAIR_NAME

    if not PAIR_NAME.match(name):
        raise PullError(f"pair name {name!r} must be lower case letters, digits, '.', '_', '-'")
    specs = [_adhoc_spec(target, "target"), _adhoc_spec(draft, "draft")]
    infos = [hub.inspect(remote) for spec in specs if isinstance(spec, list) for remote in spec]
    hub.check_free_space(hub.bytes_needed(infos))
    models = [_adhoc_files(spec, infos, tqdm_class, log) for spec in specs]
    pulled = record.PulledPair(
        target=models[0], draft=models[1], description=f"ad-hoc pair: {target} + {draft}",
        adhoc=True, drafter=drafter_of(Path(models[1][0].path)),
    )
    return _check_and_record(name, pulled, log=log)


def drafter_of(draft: Path) -> str:
    """`eagle3` / `dflash` / `dspark` / `dflash2` for such a head, else `model`: how an ad-hoc
    pair's draft drafts."""
    from spectui.engine.files.heads import head_kind

    try:
        return head_kind(draft) or "model"
    except SpectuiError:  # damaged: the checks that follow say so
        return "model"


def _remote_files(model: ModelFiles) -> list[RemoteFile]:
    return [RemoteFile(model.repo, name, model.revision) for name in model.files]


def _adhoc_spec(spec: str, role: str) -> Path | list[RemoteFile]:
    """A local file (an existing path or `ollama:`/`lmstudio:`/`hf:` reference) or the Hub files
    named by `owner/repo:file.gguf`."""
    from spectui.catalog.local.references import is_reference, resolve_reference

    if is_reference(spec):
        return resolve_reference(spec)
    local = Path(spec).expanduser()
    if local.exists():
        return local
    from spectui.catalog.local.confine import relative_parts

    repo, sep, filename = spec.partition(":")
    if not sep or not REPO_ID.match(repo) or not filename.endswith(".gguf") or relative_parts(filename) is None:
        raise PullError(
            f"--{role} {spec!r} is neither an existing file nor REPO:FILE "
            "(e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q8_0.gguf)"
        )
    if is_projector(filename):
        raise PullError(
            f"--{role} {spec!r} is a vision projector (mmproj), not a chat model; "
            "name the model's own .gguf file"
        )
    return [RemoteFile(repo, part) for part in split_parts(filename)]


def _adhoc_files(
    spec: Path | list[RemoteFile], infos: list[FileInfo], tqdm_class: type | None, log: Log | None
) -> list[record.PulledFile]:
    """Verify a local model (all split parts beside it) or download a remote one."""
    if isinstance(spec, Path):
        return [_verify_local(spec.with_name(part)) for part in split_parts(spec.name)]
    mine = [info for info in infos if info.remote in spec]
    return [_verify(info, hub.fetch(info, tqdm_class=tqdm_class, log=log)) for info in mine]


def check_complete(path: Path) -> int:
    """Size of a GGUF that is readable and complete; `PullError` if damaged or truncated."""
    from spectui.engine.files import gguf_file

    try:
        gguf_file.check_readable(path)
    except ModelLoadError as error:
        raise PullError(str(error)) from None
    expected = gguf_file.expected_size(path)
    actual = path.stat().st_size
    if expected is None:
        raise PullError(f"{path.name}: its GGUF header is damaged or truncated")
    if actual < expected:
        raise PullError(f"{path.name} is truncated ({actual:,} of {expected:,} bytes)")
    return actual


def _verify(info: FileInfo, path: Path) -> record.PulledFile:
    """A downloaded file must be a complete GGUF; a bad one is removed from the cache."""
    try:
        size = check_complete(path)
    except PullError as error:
        hub.forget_cached(path)
        raise PullError(
            f"{error} (from {info.remote}); it was removed from the cache and the pair was not "
            "marked pulled; if this repeats, the file on the Hub is damaged"
        ) from None
    return record.PulledFile(
        path=str(path), size=size, repo=info.remote.repo, filename=info.remote.filename,
        commit=info.commit, owned=True,
    )


def _verify_local(path: Path) -> record.PulledFile:
    try:
        size = check_complete(path)
    except PullError as error:
        raise PullError(f"{error}; the pair was not recorded") from None
    return record.PulledFile(path=str(path.resolve()), size=size, owned=False)


_CHECK_NOTES = {
    "model": "checking that the draft shares the target's tokenizer",
    "mtp": "checking that the target carries MTP heads",
    "sidecar": "checking that the MTP assistant was made for the target",
    "eagle3": "checking that the EAGLE-3 head fits the target (width, layers, tokenizer)",
    "dflash": "checking that the DFlash head fits the target (width, layers, mask token, tokenizer)",
    "dspark": "checking that the DSpark head fits the target (width, layers, mask token, block size, tokenizer)",
    "dflash2": "checking that the DFlash2 head fits the target (width, layers, mask token, selector, tokenizer)",
}


def _check_and_record(name: str, pulled: record.PulledPair, *, log: Log | None) -> ResolvedPair:
    """Check the drafter against the target's first file; record the pair only if it passes."""
    from spectui.catalog import checks

    target = Path(pulled.target[0].path)
    draft = Path(pulled.draft[0].path) if pulled.draft else None
    if log:
        kind = "sidecar" if pulled.drafter == "mtp" and draft else pulled.drafter
        log(f"{name}: {_CHECK_NOTES[kind]}")
    try:
        pulled.target_arch = checks.target_architecture(target)
        checks.check_drafter(target, draft, pulled.drafter)
    except IncompatibleDraftError as error:
        raise IncompatibleDraftError(f"pair {name} was not marked pulled: {error}") from None
    except SpectuiError as error:
        raise PullError(f"pair {name} was not marked pulled: {error}") from None
    pulled.pulled_at = record.now()
    replaced = record.add_pair(name, pulled)
    if replaced is not None and replaced.kept_as is not None and log:
        log(replaced.describe())
    return resolved_from_record(name, pulled)
