"""A target that serves chosen logits per context: a test double for the speculative loop.

Like simonw/llm's `MockModel` (and `scripted_drafter.ScriptedDrafter` on the proposing side), it
stands in for the part the test does not examine: the step's and the loop's decisions, and the UI
above them, are checked against logits the test chose, in microseconds, with no llama.cpp. It keeps
a cache as a real target does (the tokens decoded so far) and refuses what a real one could not do
(decoding past the context, keeping more than it holds), so a step that misuses its target fails
here too. What needs llama.cpp itself (its rollback, its batch shapes, a GGUF's vocabulary) stays
with the tiny real models.

`batch_rounding` emulates a backend whose results depend on the batch (a GPU: cuBLAS rounds a
multi-row product differently from a 1-row one): the logits of a pass of n > 1 tokens are the
script's plus a perturbation of at most that much per logit, fixed by n and the context, so a
verify pass and speculation-off's 1-row passes can disagree at a near-tie, as on such a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from spectui.engine.step.target import ReplyTarget
from spectui.errors import ContextFullError

if TYPE_CHECKING:
    from spectui.engine.rpc import RpcCluster

Script = Callable[[Sequence[int]], np.ndarray]
"""context -> the target's logits (n_vocab floats) for the token after it."""


class ScriptedTarget(ReplyTarget):
    def __init__(self, script: Script, n_vocab: int, *, n_ctx: int = 4096, eog: Collection[int] = (),
                 max_undo: int = 64, batch_rounding: float = 0.0) -> None:
        self.script = script
        self.batch_rounding = batch_rounding
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.n_seqs = 1
        self.rpc: RpcCluster | None = None
        self.eog = frozenset(eog)
        self._max_undo = max_undo
        self.path = Path("scripted-target.gguf")
        self.file = None
        self.cached: list[int] = []
        """The tokens decoded so far, as a real target's KV cache holds them."""
        self.passes = 0
        """Decodes (`extend` calls): one per cycle when the step verifies in one pass."""
        self.closed = False

    def logits(self, context: Sequence[int]) -> np.ndarray:
        """The script's logits after `context`, checked for shape (float32, as llama.cpp's)."""
        row = np.asarray(self.script(list(context)), dtype=np.float32)
        if row.shape != (self.n_vocab,):
            raise ValueError(f"the script gave logits of shape {row.shape}, not ({self.n_vocab},)")
        return row

    # ----- StepTarget ------------------------------------------------------------------------

    @property
    def can_verify_trees(self) -> bool:
        return False  # a tree is pruned to its first-choice chain, as on a hybrid target

    def truncate(self, n_keep: int) -> None:
        if n_keep < 0:
            raise ValueError(f"cannot keep {n_keep} tokens")
        del self.cached[n_keep:]

    def extend(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        if len(tokens) > self.room():
            raise ContextFullError.of(self.n_ctx)
        if not 1 <= n_logits <= len(tokens):
            raise ValueError(f"n_logits must be 1..{len(tokens)}, not {n_logits}")
        start = len(self.cached)
        self.cached.extend(int(t) for t in tokens)
        self.passes += 1
        ends = range(start + len(tokens) - n_logits + 1, start + len(tokens) + 1)
        return np.stack([self._rounded(self.cached[:end], len(tokens)) for end in ends])

    def _rounded(self, context: Sequence[int], n_tokens: int) -> np.ndarray:
        """The logits as a pass of `n_tokens` tokens returns them: the script's for one token,
        perturbed by up to `batch_rounding` (drawn from n_tokens and the context) for more."""
        row = self.logits(context)
        if self.batch_rounding and n_tokens > 1:
            noise = np.random.default_rng([n_tokens, len(context), *context[-4:]]).uniform(-1.0, 1.0, self.n_vocab)
            row = row + (self.batch_rounding * noise).astype(np.float32)
        return row

    def verify_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("the scripted target verifies chains only (can_verify_trees is False)")

    def keep_branch(self, tokens: Sequence[int], rows: Sequence[int]) -> None:
        raise NotImplementedError("the scripted target verifies chains only (can_verify_trees is False)")

    # ----- ReplyTarget -----------------------------------------------------------------------

    @property
    def max_undo(self) -> int:
        return self._max_undo

    def room(self) -> int:
        return self.n_ctx - len(self.cached)

    def kept_on_sync(self, tokens: Sequence[int]) -> int:
        common = 0
        for a, b in zip(self.cached, tokens, strict=False):
            if a != b:
                break
            common += 1
        return min(common, len(tokens) - 1)

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            raise ValueError("sync needs at least one token")
        keep = self.kept_on_sync(tokens)
        self.truncate(keep)
        return np.asarray(self.extend(tokens[keep:])[-1])

    def is_eog(self, token: int) -> bool:
        return token in self.eog

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return f" t{token}".encode()

    def check_file(self) -> None:
        pass  # no file: nothing can change under it

    def close(self) -> None:
        self.closed = True


def bigram_script(n_vocab: int, seed: int = 0, temperature: float = 1.0) -> Script:
    """Logits that depend on the last token only, drawn once from `seed`: a spread-out target
    (at `temperature` 1 its top token has p of about 0.1-0.4 over 32 tokens) whose every
    distribution a test can read back with `ScriptedTarget.logits`."""
    table = np.random.default_rng(seed).normal(0.0, 1.0, size=(n_vocab, n_vocab)) / temperature

    def script(context: Sequence[int]) -> np.ndarray:
        return np.asarray(table[context[-1] % n_vocab])

    return script
