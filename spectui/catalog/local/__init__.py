"""Models already on disk: Ollama's store, LM Studio's folders, the Hugging Face cache, and the
folders named in `config.toml`; references to them (`ollama:NAME:TAG`, ...), and automatic draft
pairing with a reason for every refusal. Read-only towards every other tool's files.

Modules: `ollama` and `stores` (layouts), `inspect` (header facts), `index` (the cache),
`discover`, `references`, `vocab` (fingerprints), `pairing`, `commands` (CLI).
"""

from spectui.catalog.local.discover import Discovery, LocalModel, discover
from spectui.catalog.local.pairing import Pairing, auto_draft_for, pair_all
from spectui.catalog.local.references import is_reference, resolve_optional, resolve_reference

__all__ = [
    "Discovery",
    "LocalModel",
    "Pairing",
    "auto_draft_for",
    "discover",
    "is_reference",
    "pair_all",
    "resolve_optional",
    "resolve_reference",
]
