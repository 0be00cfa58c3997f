"""Token trees in llama.cpp's KV cache: each token's position and sequence ids, one decode for
the whole tree, then the cache kept for one branch (`TreeCache`, a part of `LlamaModel`).

A tree of tokens is decoded after a cached prefix in one `llama_decode` (`verify_tree`).
llama.cpp has no tree mask, but its sequences give one (unsloth's llama.cpp PR #224,
`examples/speculative-tree`; llama.cpp's own `examples/speculative` with `n_seq_dft`):

- every root-to-leaf path is one sequence; the cached prefix belongs to all of them
  (`llama_memory_seq_cp`, with `kv_unified` bookkeeping only: no tensor is copied,
  src/llama-kv-cache.cpp:451-490);
- a token belongs to the sequence of every leaf below it, so it is one cell shared by them;
- its position is the prefix length + its depth: siblings share their parent's depth + 1
  (a tree verified at span positions instead silently changes greedy output: lablup/mlxcel #1214).

llama.cpp's mask keeps a cell for a query row when the cell holds the row's *first* sequence id
and its position is not later (src/llama-kv-cache.cpp:1588-1700, `seq_id[i][0]`); any leaf
below a token owns exactly the prefix, the token's ancestors, the token, and cells deeper
than it, which the position test drops. So each row sees its ancestors and nothing else.
llama.cpp's batch checks hold too (src/llama-batch.cpp:280-420): each sequence's positions in
the batch continue its cached ones and never decrease (parents come before children), and the
sequence sets of a tree's tokens are nested, never partial.

Recurrent and hybrid models cannot do this: their split of a batch refuses tokens shared by
two sequences ("sequential split is not supported when there are coupled sequences",
src/llama-batch.cpp:544), so a branch would have to re-read every shared token as its own
sequence, and each sequence keeps its own recurrent state and snapshots (src/llama-memory-
recurrent.cpp: one state cell per sequence, `mem_size = n_seq_max`). They verify chains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import llama_cpp
import numpy as np

from spectui.engine.llama.buffers import MAX_LOGIT_ROWS, DecodeListener, positions
from spectui.errors import ContextFullError


@dataclass(frozen=True)
class TreeLayout:
    depths: list[int]
    """Each token's depth below the cached prefix (0: it follows the prefix directly)."""
    seqs: list[list[int]]
    """Each token's sequence ids, ascending: one per leaf below it (a leaf: its own)."""
    n_seqs: int
    """Sequences used: one per leaf. Sequence 0 is the path of first children from the root."""

    @classmethod
    def of(cls, parents: Sequence[int]) -> TreeLayout:
        """`parents[i]`: the index of token i's parent (< i), or -1 for a token that follows the
        cached prefix."""
        n = len(parents)
        children: list[list[int]] = [[] for _ in range(n)]
        roots: list[int] = []
        depths = [0] * n
        for i, parent in enumerate(parents):
            if not -1 <= parent < i:
                raise ValueError(f"token {i} has parent {parent}: a parent must come before its child")
            if parent < 0:
                roots.append(i)
            else:
                children[parent].append(i)
                depths[i] = depths[parent] + 1
        # Leaves in depth-first order, first children first: the path of first children gets 0.
        leaves: list[int] = []
        stack = list(reversed(roots))
        while stack:
            node = stack.pop()
            if children[node]:
                stack.extend(reversed(children[node]))
            else:
                leaves.append(node)
        seqs: list[list[int]] = [[] for _ in range(n)]
        for seq, leaf in enumerate(leaves):
            node = leaf
            while node >= 0:
                seqs[node].append(seq)
                node = parents[node]
        return cls(depths, seqs, len(leaves))

    def branch_seq(self, row: int) -> int:
        """The sequence that holds the path from the prefix to `row` (and maybe deeper)."""
        return self.seqs[row][0]


class TreeHost(Protocol):
    """What the tree methods use of the model they are part of (`LlamaModel` has all of it):
    the type checker holds `LlamaModel` to this wherever a tree method is called on one."""

    n_ctx: int
    n_vocab: int
    n_seqs: int
    cached: list[int]
    decode_listeners: list[DecodeListener]
    _ctx: llama_cpp.llama_context_p | None
    _tree: TreeLayout | None

    @property
    def can_verify_trees(self) -> bool: ...
    def room(self) -> int: ...
    def keep_branch(self, tokens: Sequence[int], rows: Sequence[int]) -> None: ...
    def _live_batch(self) -> llama_cpp.llama_batch: ...
    def _run(self, batch: llama_cpp.llama_batch, n: int) -> None: ...


class TreeCache:
    """`LlamaModel`'s tree methods (a mixin: they use its context, batch and decode, as
    `TreeHost` declares)."""

    _tree: TreeLayout | None
    """The layout of the last `verify_tree`, until `keep_branch` (set by the model's constructor)."""

    @property
    def can_verify_trees(self: TreeHost) -> bool:
        """Whether `verify_tree` works here: an attention-only model whose context has sequences
        for branches, and no drafter following each decode row by row (MTP reads the rows)."""
        return self.n_seqs > 1 and not self.decode_listeners

    def verify_tree(self: TreeHost, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Decode a tree of tokens after the cached ones in ONE llama_decode; logits for every row.

        `parents[i]`: the index of token i's parent (< i), -1 for a token that follows the cache.
        Token i goes at position len(cached) + its depth and sees the cache and its ancestors
        only. Returns (len(tokens), n_vocab) logits, a view valid until the next decode. The
        cache then holds every branch: call `keep_branch` before anything else.
        """
        layout = TreeLayout.of(parents)
        n = len(tokens)
        if not self.can_verify_trees or layout.n_seqs > self.n_seqs:
            most = self.n_seqs if self.can_verify_trees else 0
            raise ValueError(f"this context verifies trees of at most {most} leaves, not {layout.n_seqs}")
        if not 1 <= n <= MAX_LOGIT_ROWS:
            raise ValueError(f"a tree has 1..{MAX_LOGIT_ROWS} tokens, not {n}")
        if n > self.room():
            raise ContextFullError.of(self.n_ctx)
        memory = llama_cpp.llama_get_memory(self._ctx)
        for seq in range(1, layout.n_seqs):  # every branch starts from the whole cached prefix
            llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
        base, batch = len(self.cached), self._live_batch()
        pos = positions(batch)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            pos[i] = base + layout.depths[i]
            batch.n_seq_id[i] = len(layout.seqs[i])
            for j, seq in enumerate(layout.seqs[i]):
                batch.seq_id[i][j] = seq
            batch.logits[i] = True
        batch.n_tokens = n
        self._tree = layout
        try:
            self._run(batch, n)
        except BaseException:
            self.keep_branch(tokens, [])  # the cache as it was: the prefix in sequence 0 only
            raise
        first = llama_cpp.llama_get_logits_ith(self._ctx, 0)
        return np.ctypeslib.as_array(first, shape=(n, self.n_vocab))

    def keep_branch(self: TreeHost, tokens: Sequence[int], rows: Sequence[int]) -> None:
        """After `verify_tree(tokens, ...)`: keep the path `rows` (indices in `tokens`, from a
        token that follows the cache down to the deepest one kept; empty: none) as sequence 0,
        and drop every other cell the tree took."""
        layout, self._tree = self._tree, None
        if layout is None:
            raise ValueError("keep_branch follows verify_tree")
        memory = llama_cpp.llama_get_memory(self._ctx)
        if not rows:
            for seq in range(layout.n_seqs):
                llama_cpp.llama_memory_seq_rm(memory, seq, len(self.cached), -1)
            for seq in range(1, layout.n_seqs):
                llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
            return
        seq = layout.branch_seq(rows[-1])
        # The branch's cells past its last kept token go, then every cell outside the branch;
        # then the branch becomes sequence 0 again (bookkeeping only: no tensor moves).
        llama_cpp.llama_memory_seq_rm(memory, seq, len(self.cached) + len(rows), -1)
        llama_cpp.llama_memory_seq_keep(memory, seq)
        if seq != 0:
            llama_cpp.llama_memory_seq_cp(memory, seq, 0, -1, -1)
            llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
        self.cached.extend(tokens[row] for row in rows)
