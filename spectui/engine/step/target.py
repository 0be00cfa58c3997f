"""What the speculative loop asks of its target, declared: the step's calls (`StepTarget`) and the
generation loop's around it (`ReplyTarget`).

`LlamaModel` is the real target; `spectui.engine.doubles.scripted_target.ScriptedTarget` is a double that
serves chosen logits per context, so that tests of the loop's decisions and of the UI above it
need no llama.cpp. The type checker holds both to these protocols (the double subclasses them; the
check at the end of this module holds `LlamaModel`), so neither can drift from what the loop calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from spectui.engine.model.llama_model import LlamaModel
    from spectui.engine.rpc import RpcCluster


class StepTarget(Protocol):
    """The target as `speculative_step` (and `tree.verify`, for a token tree) uses it. Its cache
    holds every token of the context but the newest, which the step decodes with the proposal."""

    @property
    def can_verify_trees(self) -> bool:
        """Whether `verify_tree` works here (False: a tree is pruned to its first-choice chain)."""
        ...

    def truncate(self, n_keep: int) -> None:
        """Drop every cached token from position `n_keep` on (the rollback)."""
        ...

    def extend(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Decode `tokens` after the cached ones in one pass; logits for the last `n_logits`
        rows, shape (n_logits, n_vocab): row i scores the token after tokens[:len - n_logits + i + 1]."""
        ...

    def verify_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Decode a token tree after the cached tokens in one pass; logits for every row."""
        ...

    def keep_branch(self, tokens: Sequence[int], rows: Sequence[int]) -> None:
        """After `verify_tree`: keep the accepted path `rows`, drop the rest of the tree."""
        ...


class ReplyTarget(StepTarget, Protocol):
    """The target as the generation loop (`Generator.generate`) uses it around the step."""

    n_ctx: int
    n_seqs: int
    """Sequences the context has for a tree's branches (1: chains only)."""
    rpc: RpcCluster | None
    """The RPC workers holding its layers (None: all local)."""

    @property
    def max_undo(self) -> int:
        """The most tokens one rollback can drop (caps K)."""
        ...

    def room(self) -> int:
        """Tokens that still fit in the context."""
        ...

    def kept_on_sync(self, tokens: Sequence[int]) -> int:
        """Cached tokens `sync(tokens)` keeps (the rest it decodes)."""
        ...

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly `tokens`; the logits after the last one (one row)."""
        ...

    def is_eog(self, token: int) -> bool:
        """End of generation."""
        ...

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The raw bytes of one token."""
        ...

    def check_file(self) -> None:
        """Raise `ModelFileError` when the model's file changed since it was loaded."""
        ...

    def close(self) -> None: ...


if TYPE_CHECKING:
    def _llama_model_is_a_reply_target(model: LlamaModel) -> ReplyTarget:
        return model  # the type checker fails here when LlamaModel no longer serves the loop
