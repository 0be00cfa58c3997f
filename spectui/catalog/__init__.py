"""Model pairs: the `models.toml` catalog, `spectui pull/list/rm`, and the embedded demo pair.

huggingface_hub and llama.cpp are imported only inside the functions that need them.
"""

from spectui.catalog.pairs import PairStatus, ResolvedPair
from spectui.catalog.pull import pull_adhoc, pull_pair
from spectui.catalog.resolve import list_pairs, remove_pair, resolve_pair

__all__ = [
    "PairStatus",
    "ResolvedPair",
    "list_pairs",
    "pull_adhoc",
    "pull_pair",
    "remove_pair",
    "resolve_pair",
]
