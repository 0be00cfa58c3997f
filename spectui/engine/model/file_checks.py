"""Can this draft or head draft for this target, checked on two files: a head's shape from the
headers (`files.heads`), then the shared tokenizer (`files.compat`) on both vocabularies, loaded
without weights (fast). Here, not in `files/`, because reading a vocabulary is a llama.cpp load."""

from __future__ import annotations

from pathlib import Path

from spectui.engine.files.compat import check_compatible
from spectui.engine.files.heads import misfit, read_head, read_target
from spectui.engine.model.llama_model import LlamaModel
from spectui.errors import IncompatibleDraftError


def check_compatible_files(target: Path, draft: Path) -> None:
    """`compat.check_compatible` on two GGUF files, reading only their vocabularies."""
    with LlamaModel.load(target, vocab_only=True) as t, LlamaModel.load(draft, vocab_only=True) as d:
        check_compatible(t, d, target_name=target.name, draft_name=draft.name)


def check_head_files(target: Path, head: Path) -> None:
    """Raise `IncompatibleDraftError` (one line) unless `head` can draft for `target`: its shape,
    then the shared tokenizer."""
    why = misfit(read_head(head), read_target(target), head.name, target.name)
    if why is not None:
        raise IncompatibleDraftError(why)
    check_compatible_files(target, head)
