"""One GGUF model and its llama.cpp context, driven through llama-cpp-python's low-level API.

`LlamaModel` keeps a single sequence and remembers which tokens its KV cache holds, so callers
say *what the context should be* (`extend`, `truncate`, `sync`) and the model decodes only what
is new. Logits are requested only for the rows that need them and handed out as zero-copy numpy
views into llama.cpp's output buffer: valid until the next decode, so copy what must outlive it.

Recurrent and hybrid models (Qwen3.5/3.6, LFM2, Nemotron-H, Mamba) cannot simply drop cache
entries: `rewind.Rewinder` undoes the last few tokens with llama.cpp's recurrent-state snapshots
where the arch has them, and goes further back through state checkpoints or a re-read, so every
method here works the same on every model, only at a different cost.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from spectui.engine.files.archs import rollback_kind
from spectui.engine.files.recurrent import RollbackKind
from spectui.engine.llama import hostcost
from spectui.engine.llama.buffers import MAX_LOGIT_ROWS, DecodeListener, float_view, positions
from spectui.engine.model.loaded_file import LoadedFile
from spectui.engine.model.loading import ProgressCallback, load_weights, new_context
from spectui.engine.model.rewind import Rewinder
from spectui.engine.model.tree_cache import TreeCache, TreeLayout
from spectui.engine.model.vocab import ModelVocabulary
from spectui.errors import ContextFullError, ModelFileError, ModelLoadError
from spectui.limits import MAX_DRAFT

if TYPE_CHECKING:
    from spectui.engine.rpc import RpcCluster


class LlamaModel(ModelVocabulary, TreeCache):
    """A loaded model with one context; `cached` lists the tokens its KV cache holds, in order."""

    def __init__(self, path: Path, model: llama_cpp.llama_model_p, n_ctx: int, n_threads: int,
                 n_batch: int, n_gpu_layers: int, rollback_depth: int = MAX_DRAFT, tree_seqs: int = 1) -> None:
        self.path = path
        self.n_gpu_layers = n_gpu_layers
        self.rpc: RpcCluster | None = None
        """Workers holding this model's layers (llama.cpp RPC); the model closes them."""
        self.decode_listeners: list[DecodeListener] = []
        """Drafters that follow every decode of this model (MTP heads read its hidden states)."""
        self.mtp_loaded = False
        """Whether its MTP (nextn) layers were loaded (`load(..., load_mtp=True)`)."""
        self.file: LoadedFile | None = None
        """The file as it was loaded (None for a vocabulary-only load): `check_file` asks it."""
        self._model: llama_cpp.llama_model_p | None = model
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_batch = n_batch
        self.cached: list[int] = []
        self.arch: str = self.meta("general.architecture") or ""
        stateful = bool(llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))
        self.rollback: RollbackKind = rollback_kind(self.arch, stateful)
        """How this model drops its newest tokens: "kv", "snapshots" or "none" (see recurrent.py)."""
        self._ctx: llama_cpp.llama_context_p | None = None
        self._rewinder: Rewinder | None = None
        self.n_seqs = tree_seqs if self.rollback == "kv" and n_ctx > 0 else 1
        """llama.cpp sequences this context has: the most leaves a tree `verify_tree` takes (1:
        chains only). Only attention-only models get more (see tree_cache.py)."""
        if n_ctx > 0:
            # llama.cpp needs n_ubatch > n_rs_seq + 1 (src/llama-batch.cpp:641)
            wanted = min(rollback_depth, n_batch - 2) if self.rollback == "snapshots" else 0
            self._ctx = self._new_context(n_ctx, n_threads, n_batch, max(wanted, 0))
            self._rewinder = Rewinder(self._ctx, self.rollback, llama_cpp.llama_n_rs_seq(self._ctx), path.name)
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ctx) if self._ctx else 0
        self._batch: llama_cpp.llama_batch | None = (
            llama_cpp.llama_batch_init(n_batch, 0, self.n_seqs) if self._ctx else None)
        self._views: dict[tuple[int | None, int], np.ndarray] = {}
        self._tree: TreeLayout | None = None  # the layout of the last verify_tree, until keep_branch

    # ----- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, n_ctx: int = 4096, n_gpu_layers: int | None = None,
             n_threads: int | None = None, n_batch: int = 512, vocab_only: bool = False,
             progress: ProgressCallback | None = None, rpc: RpcCluster | None = None,
             rollback_depth: int = MAX_DRAFT, load_mtp: bool = False, tree_seqs: int = 1) -> LlamaModel:
        """Load a GGUF. `n_gpu_layers=None` offloads every layer when llama.cpp has a GPU backend.

        `rollback_depth`: on snapshot archs, the last decode's tokens `truncate` can drop without
        a checkpoint (llama.cpp's n_rs_seq; each costs one recurrent state of memory). A target
        needs K (its verify pass undoes at most K); a draft needs 0 (it uses checkpoints).

        Raises `ModelLoadError` with a one-line reason for a missing, non-GGUF or damaged file.
        `rpc`: put the layers on these workers' devices (`spectui.engine.rpc.connect`); the
        model owns them from here on and closes them with itself.
        `load_mtp`: also load the MTP (nextn) layers a GGUF carries (llama.cpp skips them by
        default: `TENSOR_SKIP` in src/models/qwen35.cpp:38); the MTP drafter asks for it.
        `tree_seqs`: sequences for verifying token trees (the most leaves one may have); an
        attention-only target asks for `limits.MAX_TREE_LEAVES`, other models keep 1.
        """
        file = Path(path).expanduser()
        model, n_gpu_layers, watch = load_weights(file, n_gpu_layers=n_gpu_layers, vocab_only=vocab_only,
                                                  progress=progress, rpc=rpc, load_mtp=load_mtp)
        threads = n_threads or os.cpu_count() or 1
        try:
            loaded = cls(file, model, 0 if vocab_only else n_ctx, threads, min(n_batch, n_ctx), n_gpu_layers,
                         rollback_depth, tree_seqs)
        except ModelLoadError:
            if watch is not None:
                watch.close()
            if rpc is not None:
                rpc.check()
            raise
        loaded.file = watch
        loaded.rpc = rpc
        loaded.mtp_loaded = load_mtp
        if rpc is not None and rpc.lost:  # a worker died while the weights were on their way
            loaded.close()
            rpc.check()
        return loaded

    def _new_context(self, n_ctx: int, n_threads: int, n_batch: int, n_rs_seq: int) -> llama_cpp.llama_context_p:
        assert self._model is not None
        return new_context(self._model, self.path.name, n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                           n_rs_seq=n_rs_seq, n_seqs=self.n_seqs)

    def close(self) -> None:
        self._views.clear()
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None
        if self.rpc is not None:
            self.rpc.close()
        if self.file is not None:
            self.file.close()
            self.file = None

    def check_file(self) -> None:
        """Raise `ModelFileError` when the file was truncated or rewritten since it was loaded
        (one fstat: cheap enough before every cycle)."""
        if self.file is not None and (what := self.file.changed()) is not None:
            raise ModelFileError(what)

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- state ---------------------------------------------------------------------------

    @property
    def n_layer(self) -> int:
        n: int = llama_cpp.llama_model_n_layer(self._model)
        return n

    @property
    def model_handle(self) -> llama_cpp.llama_model_p:
        """llama.cpp's model, for drafters that build a context on it (MTP heads)."""
        if self._model is None:
            raise RuntimeError(f"{self.path.name} is closed")
        return self._model

    @property
    def vocab_handle(self) -> llama_cpp.llama_vocab_p:
        """llama.cpp's vocabulary, for a grammar over it (`step.grammar`)."""
        return self._vocab

    @property
    def context_handle(self) -> llama_cpp.llama_context_p:
        """llama.cpp's context, for drafters that read it (MTP: hidden states, shared cache)."""
        if self._ctx is None:
            raise self._no_context()
        return self._ctx

    @property
    def has_context(self) -> bool:
        """False for a vocabulary-only load and once closed: no context to decode in or read."""
        return bool(self._ctx)

    @property
    def _live_rewinder(self) -> Rewinder:
        if self._rewinder is None:
            raise self._no_context()
        return self._rewinder

    def _live_batch(self) -> llama_cpp.llama_batch:
        if self._batch is None:
            raise self._no_context()
        return self._batch

    def _no_context(self) -> RuntimeError:
        return RuntimeError(f"{self.path.name} has no context (it was loaded for its vocabulary only, or closed)")

    @property
    def checkpoint_positions(self) -> list[int]:
        """Where kept state checkpoints stand (token counts): a deep rewind resumes there."""
        return [c.n_tokens for c in self._rewinder.checkpoints.kept] if self._rewinder else []

    @property
    def can_roll_back(self) -> bool:
        """False only for models whose recurrent state has no rollback at all (`rollback` "none"):
        they cannot verify a draft, so they run with speculation off."""
        return self.rollback != "none"

    @property
    def rollback_depth(self) -> int:
        """Snapshots the context keeps (llama.cpp's `llama_n_rs_seq`); 0 without snapshots."""
        return self._rewinder.depth if self._rewinder else 0

    @property
    def max_undo(self) -> int:
        """The most tokens of one decode `truncate` can drop without restoring a checkpoint and
        decoding again: the snapshot depth ("snapshots"), 0 ("none"), and for "kv" the most rows
        a verify pass may have, less one. A verify pass of [last, d_1..d_K] undoes at most K, so
        a speculative loop caps K by this."""
        return MAX_LOGIT_ROWS - 1 if self.rollback == "kv" else self.rollback_depth

    @property
    def speculation_blocker(self) -> str | None:
        """Why this model cannot be a speculative target or draft, in one line; None if it can."""
        if self.can_roll_back:
            return None
        return f"speculation is off: {self.path.name} (arch {self.arch}) cannot roll back its recurrent state"

    @property
    def rewind_counts(self) -> dict[str, int]:
        """How rewinds were done so far: "kv", "snapshot", "checkpoint", "reread"."""
        return dict(self._live_rewinder.counts)

    # ----- the KV cache ----------------------------------------------------------------------

    def truncate(self, n_keep: int) -> None:
        """Drop every cached token from position `n_keep` on. A recurrent state goes back by
        snapshot, else by checkpoint or re-read plus decoding the tokens up to `n_keep` again."""
        if n_keep >= len(self.cached):
            return
        kept = self.cached[:n_keep]
        start = self._live_rewinder.rewind(self.cached, n_keep)
        self._decode_chunks(kept[start:])

    def reset(self) -> None:
        self._live_rewinder.clear()
        self.cached.clear()

    def checkpoint(self) -> None:
        """Make a later `truncate`/`sync` back to the current position cheap on a recurrent or
        hybrid model (a state copy, in host memory); a no-op for attention-only models."""
        self._live_rewinder.keep_checkpoint(len(self.cached), again=True)

    def common_prefix(self, tokens: Sequence[int]) -> int:
        """Cached tokens that `tokens` starts with. A drafter asks every cycle with the whole
        context, which usually extends the cache: one list comparison (C speed) says so before a
        token-by-token walk (~50 us per 1,000 tokens in Python) looks for where they part."""
        cached = self.cached
        n = min(len(cached), len(tokens))
        head = tokens[:n]
        if (cached if n == len(cached) else cached[:n]) == (head if isinstance(head, list) else list(head)):
            return n
        for i, (a, b) in enumerate(zip(cached, tokens, strict=False)):
            if a != b:
                return i
        return n

    def kept_on_sync(self, tokens: Sequence[int]) -> int:
        """Cached tokens `sync(tokens)` keeps: the common prefix, less the last token (whose
        logits it needs), or less where a recurrent state must go back to a checkpoint;
        `len(tokens)` minus this is what it decodes."""
        keep = min(self.common_prefix(tokens), len(tokens) - 1)
        return self._live_rewinder.start(len(self.cached), keep)

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly `tokens`; return the logits after the last one.

        Reuses the longest cached prefix it can; at least the last token is decoded again so its
        logits exist. This is how a new chat turn reuses the previous turns' cache. On recurrent
        and hybrid models it also keeps a checkpoint of the state before that last token, so a
        later sync to these same tokens (a regenerated reply, a re-run) needs no re-read.
        """
        if not tokens:
            raise ValueError("sync needs at least one token")
        start = self._rewind_for(tokens)
        if self.rollback == "kv":
            return _last_row(self.extend(tokens[start:]))
        self._decode_chunks(tokens[start:-1])
        self._live_rewinder.keep_checkpoint(len(self.cached))
        return _last_row(self.extend(tokens[-1:]))

    def catch_up(self, tokens: Sequence[int]) -> np.ndarray:
        """`sync` for a drafter, once per cycle: the same result, but instead of keeping a
        checkpoint for later turns, a recurrent/hybrid model arms a rolling one at the end of
        `tokens`, copied only if more tokens are then decoded (the draft's proposals), so the
        next cycle can drop the rejected proposals and read the accepted ones in one batch."""
        if not tokens:
            raise ValueError("catch_up needs at least one token")
        start = self._rewind_for(tokens)
        logits = _last_row(self.extend(tokens[start:]))
        self._live_rewinder.arm(len(self.cached))
        return logits

    def _rewind_for(self, tokens: Sequence[int]) -> int:
        """Rewind to what `kept_on_sync(tokens)` promises; return that position."""
        return self._live_rewinder.rewind(self.cached, min(self.common_prefix(tokens), len(tokens) - 1))

    def room(self) -> int:
        """Tokens that still fit in the context."""
        return self.n_ctx - len(self.cached)

    def extend(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Decode `tokens` after the cached ones; return logits for the last `n_logits` of them.

        The result, shape (n_logits, n_vocab), is a view into llama.cpp's output buffer: no copy,
        valid until the next decode. Rows without a request cost llama.cpp no output work.
        """
        if len(tokens) > self.room():
            raise ContextFullError.of(self.n_ctx)
        most = min(len(tokens), self.n_batch, MAX_LOGIT_ROWS)
        if not 1 <= n_logits <= most:
            raise ValueError(f"n_logits must be 1..{most}, not {n_logits}")
        last = max(0, len(tokens) - self.n_batch)  # the final decode holds the rows with logits
        self._decode_chunks(tokens[:last])
        self._decode(tokens[last:], n_logits=n_logits)
        started = hostcost.now()
        first = llama_cpp.llama_get_logits_ith(self._ctx, -n_logits)  # waits for an async backend
        hostcost.add_llama(started)
        return self._logits_view(first, n_logits)

    def _logits_view(self, first: ctypes._Pointer[ctypes.c_float], n_logits: int) -> np.ndarray:
        """The rows at `first` as numpy, reusing the view made the last time llama.cpp answered
        this address for this many rows (its output buffer stays put: a decode of one row, as a
        draft's, gets the same address each time): ~20 us less per decode right after one."""
        key = (ctypes.cast(first, ctypes.c_void_p).value, n_logits)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = float_view(first, (n_logits, self.n_vocab))
        return view

    def _decode_chunks(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` without logits, n_batch at a time."""
        if len(tokens) > self.room():
            raise ContextFullError(
                f"the context is full ({self.n_ctx} tokens); start a new chat or raise --ctx"
            )
        for start in range(0, len(tokens), self.n_batch):
            self._decode(tokens[start : start + self.n_batch], n_logits=0)

    def _decode(self, tokens: Sequence[int], *, n_logits: int) -> None:
        """One llama_decode of at most n_batch tokens (one ubatch); logits for the last
        `n_logits` rows."""
        batch = self._live_batch()
        base = len(self.cached)
        n = len(tokens)
        pos = positions(batch)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            pos[i] = base + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= n - n_logits
        batch.n_tokens = n
        self._run(batch, n)
        self.cached.extend(tokens)
        for listener in self.decode_listeners:
            listener(base, tokens)

    def _run(self, batch: llama_cpp.llama_batch, n: int) -> None:
        """llama_decode of a filled batch of n rows; raises on failure, the cache unchanged."""
        self._live_rewinder.before_decode(len(self.cached))
        started = hostcost.now()
        status = llama_cpp.llama_decode(self._ctx, batch)
        if self.rpc is not None:
            llama_cpp.llama_synchronize(self._ctx)  # every answer is in (or a lost worker's dummy)
        hostcost.add_llama(started)
        if self.rpc is not None:
            self.rpc.check()  # a worker died: this decode's results are void, the cache stays as it was
        if status == 1:
            raise ContextFullError.of(self.n_ctx)
        if status != 0:
            raise ModelLoadError(f"llama_decode failed with status {status} on {self.path.name}")
        self._live_rewinder.after_decode(n)


def _last_row(rows: np.ndarray) -> np.ndarray:
    row: np.ndarray = rows[-1]
    return row
