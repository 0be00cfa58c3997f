"""Checkpoints of a recurrent state: how a hybrid or recurrent context goes back further than its
snapshots reach, as llama.cpp's server does (`create_checkpoint` and the restore in
tools/server/server-context.cpp:2290-2352 and 3331-3357).

`llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)` copies only the
recurrent part of a hybrid memory (src/llama-memory-hybrid.cpp:190-195; a purely recurrent
memory writes its whole state, which is the same thing); with a snapshot rollback pending it
copies the rolled-back state (src/llama-memory-recurrent.cpp:778-800). Setting it back restores
the state and its position and clears any pending rollback (src/llama-memory-recurrent.cpp:873-875);
the attention KV cache past that position is then dropped with `llama_memory_seq_rm` by the
caller. Copies live in host memory: one state per checkpoint, a few MB for a 1B model, about
150 MB for Qwen3.6-27B.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp
import numpy as np

PARTIAL_ONLY = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
MAX_KEPT = 4
"""Checkpoints kept for later turns (prompt ends). When there are more, the one closest to its
predecessor goes (never the newest), so they stay spread over the context."""


@dataclass
class Checkpoint:
    n_tokens: int
    """The state after the first `n_tokens` cached tokens."""
    data: np.ndarray
    """llama.cpp's serialized recurrent state (uint8)."""


def _pointer(data: np.ndarray) -> ctypes._Pointer[ctypes.c_uint8]:
    return data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


class CheckpointStore:
    """Kept checkpoints (sorted by position) and one rolling checkpoint, reused every cycle."""

    def __init__(self, ctx: llama_cpp.llama_context_p, max_kept: int = MAX_KEPT) -> None:
        self._ctx = ctx
        self.max_kept = max_kept
        self.kept: list[Checkpoint] = []
        self.rolling: Checkpoint | None = None
        self.saved_bytes = 0
        """Bytes copied out so far (a cost counter for tests and benchmarks)."""

    def save(self, n_tokens: int, *, rolling: bool) -> Checkpoint:
        """Copy the current recurrent state, which must be the state after `n_tokens` tokens."""
        size = llama_cpp.llama_state_seq_get_size_ext(self._ctx, 0, PARTIAL_ONLY)
        reuse = self.rolling.data if rolling and self.rolling is not None else None
        if rolling:
            self.rolling = None  # its buffer is overwritten below
        data = reuse if reuse is not None and reuse.size == size else np.empty(size, np.uint8)
        written = llama_cpp.llama_state_seq_get_data_ext(self._ctx, _pointer(data), size, 0, PARTIAL_ONLY)
        if written != size:
            raise RuntimeError(f"llama.cpp wrote {written} of {size} bytes of a state checkpoint")
        self.saved_bytes += size
        checkpoint = Checkpoint(n_tokens, data)
        if rolling:
            self.rolling = checkpoint
        else:
            self.kept = [c for c in self.kept if c.n_tokens != n_tokens]
            self.kept.append(checkpoint)
            self.kept.sort(key=lambda c: c.n_tokens)
            while len(self.kept) > self.max_kept:
                self.kept.pop(self._densest())
        return checkpoint

    def _densest(self) -> int:
        """Index of the kept checkpoint (other than the newest) nearest to the one before it."""
        positions = [0] + [c.n_tokens for c in self.kept]
        gaps = [positions[i + 1] - positions[i] for i in range(len(self.kept) - 1)]
        return gaps.index(min(gaps))

    def has_kept(self, n_tokens: int) -> bool:
        return any(c.n_tokens == n_tokens for c in self.kept)

    def best(self, n_max: int) -> Checkpoint | None:
        """The checkpoint closest below or at `n_max` tokens, or None."""
        candidates = [c for c in [*self.kept, self.rolling] if c is not None and c.n_tokens <= n_max]
        return max(candidates, key=lambda c: c.n_tokens, default=None)

    def restore(self, checkpoint: Checkpoint) -> bool:
        """Put the recurrent state back; False when llama.cpp rejects the data (it then clears
        the sequence: src/llama-memory-recurrent.cpp:867-870)."""
        size = checkpoint.data.size
        read: int = llama_cpp.llama_state_seq_set_data_ext(self._ctx, _pointer(checkpoint.data), size, 0, PARTIAL_ONLY)
        return read == size

    def drop_after(self, n_tokens: int) -> None:
        """Forget checkpoints past `n_tokens`: the tokens they stand for may be replaced."""
        self.kept = [c for c in self.kept if c.n_tokens <= n_tokens]
        if self.rolling is not None and self.rolling.n_tokens > n_tokens:
            self.rolling = None

    def clear(self) -> None:
        self.kept.clear()
        self.rolling = None
