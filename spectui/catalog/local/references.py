"""`resolve_reference`: the file behind `ollama:…`, `lmstudio:…`, `hf:…` or a plain path.

Accepted wherever a model path is (`--target`, `--draft`, `spectui pull --target/--draft`,
`spectui pair add`):

- `ollama:NAME[:TAG]` (tag `latest` by default), `ollama:NAMESPACE/NAME:TAG`,
  `ollama:HOST/NAMESPACE/NAME:TAG`: the GGUF blob in Ollama's store (`$OLLAMA_MODELS`).
- `lmstudio:PUBLISHER/REPO[/FILE]`: a file in LM Studio's models folder; without FILE the
  folder must hold exactly one language model (otherwise the error lists them).
- `hf:OWNER/REPO:FILE`: a file already in the Hugging Face cache (nothing is downloaded).
- anything else is a path, returned as given (with `~` expanded).

Every failure is one `LocalModelError` line naming what was looked for and where. A reference
never leads out of the store it names (`spectui.catalog.local.confine`): its parts are relative
names (no `..`, no absolute FILE), and an `hf:` file, its cache links followed, must lie inside
its repo's folder of the cache.
"""

from __future__ import annotations

from pathlib import Path

from spectui.catalog.local import ollama
from spectui.catalog.local.confine import inside, is_dir, is_file, relative_parts
from spectui.catalog.local.stores import LMSTUDIO_HINT, hf_cache_root, hf_repo_folder, hf_snapshots, lmstudio_roots
from spectui.catalog.schema import REPO_ID
from spectui.errors import LocalModelError

PREFIXES = ("ollama:", "lmstudio:", "hf:")


def is_reference(text: str) -> bool:
    """True for `ollama:`, `lmstudio:` and `hf:` references (not for plain paths)."""
    return text.startswith(PREFIXES)


def resolve_reference(text: str) -> Path:
    """The GGUF file `text` names (for a split model, its first part)."""
    if text.startswith("ollama:"):
        return ollama.resolve(text.removeprefix("ollama:"))
    if text.startswith("lmstudio:"):
        return _resolve_lmstudio(text.removeprefix("lmstudio:"))
    if text.startswith("hf:"):
        return _resolve_hf(text.removeprefix("hf:"))
    return expand_user(text)


def expand_user(text: str) -> Path:
    """`Path(text).expanduser()`, with `~user` for no such user as one line, not a traceback."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise LocalModelError(f"{text}: the ~ in it names no user here; give the full path") from None


def resolve_optional(text: str | None) -> Path | None:
    return None if not text else resolve_reference(text)


def _language_models(folder: Path) -> list[str]:
    """GGUF files in an LM Studio repo folder that are language models (first parts only)."""
    from spectui.catalog.local.discover import is_later_split_part
    from spectui.catalog.local.index import LocalIndex
    from spectui.catalog.local.inspect import skip_reason

    index = LocalIndex()
    names = []
    for path in sorted(folder.glob("*.gguf")):
        if is_later_split_part(path) or not is_file(path):
            continue
        info = index.entry(path).info
        if info is not None and skip_reason(info) is None:
            names.append(path.name)
    index.save()
    return names


def _resolve_lmstudio(body: str) -> Path:
    parts = relative_parts(body) or []
    if len(parts) < 2:
        raise LocalModelError(
            f"lmstudio:{body} is not an LM Studio model; write lmstudio:PUBLISHER/REPO[/FILE.gguf]"
        )
    roots = lmstudio_roots()
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    for root in roots:
        folder = root / repo
        if not is_dir(folder):
            continue
        if filename:
            if is_file(folder / filename):
                return folder / filename
            continue
        names = _language_models(folder)
        if not names:
            raise LocalModelError(
                f"lmstudio: {folder} holds no language model (only projectors, adapters or damaged "
                f"files); {LMSTUDIO_HINT}"
            )
        if len(names) == 1:
            return folder / names[0]
        if len(names) > 1:
            listed = ", ".join(names)
            raise LocalModelError(
                f"lmstudio: {repo} in {root} holds {len(names)} models ({listed}); name one, "
                f"e.g. lmstudio:{repo}/{names[0]}"
            )
    where = " or ".join(str(r) for r in roots)
    what = f"file {repo}/{filename}" if filename else f"model folder {repo}"
    raise LocalModelError(f"lmstudio: no {what} in {where}; {LMSTUDIO_HINT}")


def _resolve_hf(body: str) -> Path:
    repo, sep, filename = body.partition(":")
    if not sep or not REPO_ID.match(repo) or not filename.endswith(".gguf") or relative_parts(filename) is None:
        raise LocalModelError(
            f"hf:{body} is not a cached Hub file; write hf:OWNER/REPO:FILE.gguf "
            "(e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q8_0.gguf)"
        )
    root = hf_cache_root()
    folder = root / hf_repo_folder(repo)
    for snapshot in hf_snapshots(folder):
        path = snapshot / filename
        if is_file(path):
            return inside(folder, path, f"the cache's folder of {repo} ({folder})")
        if path.is_symlink():
            raise LocalModelError(
                f"hf: {repo}:{filename} is only partly downloaded in {root} (its blob is missing); "
                f"download it again: `hf download {repo} {filename}`"
            )
    cached = sorted({p.name for s in hf_snapshots(folder) for p in s.rglob("*.gguf")})
    here = f" (cached from that repo: {', '.join(cached)})" if cached else ""
    raise LocalModelError(
        f"hf: {repo}:{filename} is not in the Hugging Face cache {root} "
        f"(looked for {folder.name}/snapshots/*/{filename}){here}; download it: `hf download {repo} {filename}`"
    )
