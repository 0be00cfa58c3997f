"""`KINDS`: every registered drafter kind, one `DrafterKind` line each (see `spectui.engine.drafters`).

A table only: the kind modules read their own line here (`KINDS["model"].max_k`), and the registry
in `__init__` imports each kind's module when it builds one, so nothing here imports a kind module
and no kind module imports the registry.
"""

from __future__ import annotations

from collections.abc import Mapping

from spectui.engine.drafters.spec import DrafterKind
from spectui.limits import MAX_DRAFT, MAX_LOOKUP_DRAFT

KINDS: Mapping[str, DrafterKind] = {kind.name: kind for kind in (
    DrafterKind("model", "a draft model: a smaller GGUF with the target's tokenizer (--draft)",
                label="draft model", colour="green", family="draft model", max_k=MAX_DRAFT,
                needs="draft model", rank=2, module="model"),
    DrafterKind("mtp", "MTP heads: the target's own multi-token-prediction layers, or a Gemma 4 "
                "assistant sidecar (--draft mtp-*.gguf)",
                label="MTP heads", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="nothing", rank=1, module="mtp"),
    DrafterKind("eagle3", "an EAGLE-3 head: one layer that drafts from the target's hidden states "
                "(--draft HEAD.gguf, arch eagle3)",
                label="EAGLE-3 head", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="head", rank=1, module="eagle3"),
    DrafterKind("dflash", "a DFlash head: drafts a whole block in one pass from the target's hidden states "
                "(--draft HEAD.gguf, arch dflash)",
                label="DFlash head", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="head", rank=1, module="dflash"),
    DrafterKind("dspark", "a DSpark head: a DFlash block with a Markov head chained over it "
                "(--draft HEAD.gguf, arch dflash with markov_w1)",
                label="DSpark head", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="head", rank=1, module="dspark"),
    DrafterKind("dflash2", "a DFlash2 head: a DFlash block read through its candidate selector "
                "(--draft HEAD.gguf, arch dflash with dflash.selector_top_k)",
                label="DFlash2 head", colour="magenta", family="heads", max_k=MAX_DRAFT,
                needs="head", rank=1, module="dflash2"),
    DrafterKind("ngram", "prompt lookup: what followed the last few tokens earlier in the chat (free, no draft)",
                label="n-gram lookup", colour="cyan", family="lookup", max_k=MAX_LOOKUP_DRAFT,
                needs="nothing", rank=0, module="ngram"),
    DrafterKind("suffix", "suffix decoding: the likeliest continuation from this chat and your past chats "
                "(free, no draft)",
                label="suffix lookup", colour="cyan", family="lookup", max_k=MAX_LOOKUP_DRAFT,
                needs="nothing", rank=0, module="suffix"),
)}
