"""Rewinding a context to a shorter prefix of its tokens, whatever its memory can undo.

Attention-only models ("kv") drop any suffix with `llama_memory_seq_rm`. Recurrent and hybrid
models cannot: their state folds every token in. llama.cpp's rules for them (0.3.36):

- Snapshot rollback (`n_rs_seq` > 0, archs in `recurrent.SNAPSHOT_ARCHS`): the decode of a
  ubatch of n tokens writes the states after its last min(n, n_rs_seq + 1) tokens into snapshot
  slots (src/models/delta-net-base.cpp:561-605, "op writes the last min(n_seq_tokens, K)
  snapshots" at 587; conv rows 497-519). `seq_rm(seq, p0, -1)` then accepts a rollback of
  r = pos_max - p0 + 1 tokens when 1 <= r <= n_rs_seq and no rollback is pending, and only
  records it (src/llama-memory-recurrent.cpp:193-203); the next decode reads
  the state from snapshot slot r (`s_copy`, src/llama-memory-recurrent.cpp:1346-1364) and clears
  it. llama.cpp does *not* check that the r tokens were all in the last decode: rolling back the
  whole last decode (r = n), or tokens of an earlier decode, returns true and silently restores a
  stale state (slot r was never written by that decode). So a rollback is only correct for
  1 <= r <= min(n_rs_seq, n_last - 1), where n_last is the size of the last ubatch; spectui
  decodes at most n_ubatch tokens per llama_decode, so that is the last decode's size. To keep
  the snapshotted tail in one ubatch llama.cpp splits batches with `split_equal(n_ubatch, ...,
  n_rs_seq + 1)` [TAG_RECURRENT_ROLLBACK_SPLITS] (src/llama-memory-hybrid.cpp:82-89,
  src/llama-memory-recurrent.cpp:440-446), which asserts n_ubatch > n_rs_seq + 1
  (src/llama-batch.cpp:641).
- Anything further back: restore a checkpoint (`checkpoints.py`) at or before the target
  position and decode the tokens after it again; with none, clear and re-read from the start.

`Rewinder` picks the cheapest of these that is correct and never leaves a state that does not
match the tokens: every `llama_memory_seq_rm` result is checked.
"""

from __future__ import annotations

from collections import Counter

import llama_cpp

from spectui.engine.files.recurrent import RollbackKind
from spectui.engine.model.checkpoints import CheckpointStore
from spectui.errors import RollbackError


class Rewinder:
    """The rollback state of one single-sequence context."""

    def __init__(self, ctx: llama_cpp.llama_context_p, kind: RollbackKind, depth: int, name: str) -> None:
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.kind = kind
        self.depth = depth
        """Snapshots llama.cpp keeps per decode (its n_rs_seq; 0 when it keeps none)."""
        self.name = name
        self.checkpoints = CheckpointStore(ctx)
        self.counts: Counter[str] = Counter()
        """How rewinds were done: "kv", "snapshot", "checkpoint", "reread" (tests, benchmarks)."""
        self._last_decode = 0  # tokens in the last llama_decode (one ubatch)
        self._pending = False  # a snapshot rollback is recorded but not yet applied
        self._armed_at: int | None = None  # position of a rolling checkpoint not yet taken

    @property
    def uses_checkpoints(self) -> bool:
        return self.kind != "kv"

    def snapshot_reach(self) -> int:
        """Tokens a snapshot rollback can undo right now (0 when none)."""
        if self.kind != "snapshots" or self._pending:
            return 0
        return max(0, min(self.depth, self._last_decode - 1))

    def start(self, n_cached: int, keep: int) -> int:
        """Where decoding must resume so that the cache holds its first `keep` tokens (<= keep);
        what `rewind` would do, without doing it."""
        if keep >= n_cached:
            return n_cached
        if self.kind == "kv" or n_cached - keep <= self.snapshot_reach():
            return keep
        checkpoint = self.checkpoints.best(keep)
        return checkpoint.n_tokens if checkpoint else 0

    def rewind(self, cached: list[int], keep: int) -> int:
        """Drop cached tokens from `keep` on, as far as the memory allows; `cached` is cut to
        what the state now really holds, and its new length (<= keep) returned."""
        n_cached = len(cached)
        if keep >= n_cached:
            return n_cached
        if self.kind == "kv":
            self._seq_rm(keep, "kv")
        elif n_cached - keep <= self.snapshot_reach() and self._try_snapshot(keep):
            self._pending = True
        else:
            keep = self._restore(keep)
        del cached[keep:]
        self.checkpoints.drop_after(keep)
        return keep

    def _try_snapshot(self, keep: int) -> bool:
        if llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1):
            self.counts["snapshot"] += 1
            return True
        self.counts["snapshot_refused"] += 1  # our rules and llama.cpp's disagree: go further back
        return False

    def _restore(self, keep: int) -> int:
        checkpoint = self.checkpoints.best(keep)
        if checkpoint is None:
            self.clear()
            self.counts["reread"] += 1
            return 0
        if not self.checkpoints.restore(checkpoint):
            self.clear()
            raise RollbackError(
                f"llama.cpp rejected a saved state of {self.name}; its context was cleared, "
                "so send the message again (it re-reads the whole prompt)"
            )
        self._seq_rm(checkpoint.n_tokens, "checkpoint")
        self._last_decode = 0
        self._pending = False
        return checkpoint.n_tokens

    def _seq_rm(self, keep: int, how: str) -> None:
        if not llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1):
            self.clear()
            raise RollbackError(
                f"llama.cpp refused to drop the cache of {self.name} past token {keep}; its "
                "context was cleared, so send the message again (it re-reads the whole prompt)"
            )
        self.counts[how] += 1

    # ----- bookkeeping around decodes ---------------------------------------------------------

    def before_decode(self, n_cached: int) -> None:
        """Take an armed rolling checkpoint now that the state is about to move past it."""
        if self._armed_at is not None:
            if self._armed_at == n_cached:
                self.checkpoints.save(n_cached, rolling=True)
            self._armed_at = None

    def after_decode(self, n_tokens: int) -> None:
        self._last_decode = n_tokens
        self._pending = False

    def arm(self, n_cached: int) -> None:
        """Make a later rewind to `n_cached` cheap: the state is copied lazily, just before the
        next decode, so a caller that decodes nothing more pays nothing."""
        if self.uses_checkpoints:
            self._armed_at = n_cached

    def keep_checkpoint(self, n_cached: int, *, again: bool = False) -> None:
        """Copy the state now, to come back to this position in later turns (a copy already
        kept there is taken again only with `again`)."""
        if self.uses_checkpoints and n_cached > 0 and (again or not self.checkpoints.has_kept(n_cached)):
            self.checkpoints.save(n_cached, rolling=False)

    def clear(self) -> None:
        """The memory was (or is about to be) cleared: nothing to roll back or restore."""
        llama_cpp.llama_memory_clear(self._memory, True)
        self.checkpoints.clear()
        self._last_decode = 0
        self._pending = False
        self._armed_at = None
