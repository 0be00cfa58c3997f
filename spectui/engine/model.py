"""One GGUF model and its llama.cpp context, driven through llama-cpp-python's low-level API.

`LlamaModel` keeps a single sequence and remembers which tokens its KV cache holds, so callers
say *what the context should be* (`extend`, `truncate`) and the model decodes only what is new.
Logits are requested only for the rows that need them and handed out as zero-copy numpy views
into llama.cpp's output buffer: valid until the next decode, so copy what must outlive it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import llama_cpp
import numpy as np

from spectui.engine import gguf_file, llama_log
from spectui.errors import ContextFullError, LoadCancelled, ModelLoadError, UnsupportedModelError

_backend_ready = False
# The most rows we ever ask logits for in one decode ([last, d_1..d_16]). llama.cpp sizes its
# compute buffer for this many output rows: at the default (n_batch) a 262k-token vocabulary
# reserves 512 MiB per context for logits we never request.
MAX_LOGIT_ROWS = 32

ProgressCallback = Callable[[float], bool | None]
"""Receives the load's progress, 0..1; returning False cancels the load (`LoadCancelled`)."""


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llama_log.install()
        llama_cpp.llama_backend_init()
        _backend_ready = True


def gpu_offload_available() -> bool:
    """True when the installed llama.cpp was built with a GPU backend."""
    _init_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


class LlamaModel:
    """A loaded model with one context; `cached` lists the tokens its KV cache holds, in order."""

    def __init__(self, path: Path, model: llama_cpp.llama_model_p, n_ctx: int, n_threads: int,
                 n_batch: int, n_gpu_layers: int) -> None:
        self.path = path
        self.n_gpu_layers = n_gpu_layers
        self._model = model
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_batch = n_batch
        self.cached: list[int] = []
        self._ctx = None
        if n_ctx > 0:
            self._ctx = self._new_context(n_ctx, n_threads, n_batch)
            self._memory = llama_cpp.llama_get_memory(self._ctx)
        self.n_ctx: int = llama_cpp.llama_n_ctx(self._ctx) if self._ctx else 0
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1) if self._ctx else None

    # ----- loading -------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int | None = None,
        n_threads: int | None = None,
        n_batch: int = 512,
        vocab_only: bool = False,
        progress: ProgressCallback | None = None,
    ) -> LlamaModel:
        """Load a GGUF. `n_gpu_layers=None` offloads every layer when llama.cpp has a GPU backend.

        Raises `ModelLoadError` with a one-line reason for a missing, non-GGUF or damaged file.
        """
        file = Path(path).expanduser()
        gguf_file.check_readable(file)
        _init_backend()
        if n_gpu_layers is None:
            n_gpu_layers = -1 if gpu_offload_available() else 0
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        cancelled: list[bool] = []
        keep_alive = None
        if progress is not None:
            keep_alive = _progress_callback(progress, cancelled)
            params.progress_callback = keep_alive
        model = llama_cpp.llama_model_load_from_file(str(file).encode(), params)
        del keep_alive
        if not model and cancelled:
            raise LoadCancelled(f"loading {file.name} was cancelled")
        if not model:
            raise ModelLoadError(f"llama.cpp could not load {file}: {gguf_file.diagnose(file)}")
        threads = n_threads or os.cpu_count() or 1
        return cls(file, model, 0 if vocab_only else n_ctx, threads, min(n_batch, n_ctx), n_gpu_layers)

    def _new_context(self, n_ctx: int, n_threads: int, n_batch: int) -> llama_cpp.llama_context_p:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_outputs_max = MAX_LOGIT_ROWS
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not ctx:
            raise ModelLoadError(
                f"llama.cpp could not create a {n_ctx}-token context for {self.path.name}: "
                "not enough memory; try a smaller --ctx or fewer --n-gpu-layers"
            )
        return ctx

    def close(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- metadata ------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None."""
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    @property
    def name(self) -> str:
        return self.meta("general.name") or self.path.stem

    @property
    def chat_template(self) -> str | None:
        return self.meta("tokenizer.chat_template")

    @property
    def n_layer(self) -> int:
        return llama_cpp.llama_model_n_layer(self._model)

    @property
    def size_bytes(self) -> int:
        return llama_cpp.llama_model_size(self._model)

    @property
    def can_roll_back(self) -> bool:
        """False for recurrent/hybrid models, whose state cannot drop its last few tokens."""
        return not (llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(self._model))

    @property
    def vocab_type(self) -> int:
        return llama_cpp.llama_vocab_type(self._vocab)

    @property
    def bos_id(self) -> int:
        return llama_cpp.llama_vocab_bos(self._vocab)

    @property
    def eos_id(self) -> int:
        return llama_cpp.llama_vocab_eos(self._vocab)

    @property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))

    @property
    def add_eos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_eos(self._vocab))

    def token_text(self, token: int) -> str:
        raw = llama_cpp.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT, or any other end marker the vocabulary declares."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    # ----- text <-> tokens -----------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character)."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    # ----- the KV cache ----------------------------------------------------------------------

    def truncate(self, n_keep: int) -> None:
        """Drop every cached token from position `n_keep` on."""
        if n_keep >= len(self.cached):
            return
        if not llama_cpp.llama_memory_seq_rm(self._memory, 0, n_keep, -1):
            raise UnsupportedModelError(
                f"{self.path.name} cannot roll back part of its context (a recurrent or hybrid "
                "model), so it cannot be used for speculative decoding; run it with -k 0"
            )
        del self.cached[n_keep:]

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)
        self.cached.clear()

    def common_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        for a, b in zip(self.cached, tokens, strict=False):
            if a != b:
                break
            n += 1
        return n

    def kept_on_sync(self, tokens: Sequence[int]) -> int:
        """Cached tokens `sync(tokens)` keeps: the common prefix, less the last token (whose
        logits it needs); `len(tokens)` minus this is what it decodes."""
        return min(self.common_prefix(tokens), len(tokens) - 1)

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        """Make the cache hold exactly `tokens`; return the logits after the last one.

        Reuses the longest cached prefix; at least the last token is decoded again so its logits
        exist. This is how a new chat turn reuses the previous turns' KV cache.
        """
        if not tokens:
            raise ValueError("sync needs at least one token")
        keep = self.kept_on_sync(tokens)
        self.truncate(keep)
        return self.extend(tokens[keep:])[-1]

    def room(self) -> int:
        """Tokens that still fit in the context."""
        return self.n_ctx - len(self.cached)

    def extend(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """Decode `tokens` after the cached ones; return logits for the last `n_logits` of them.

        The result, shape (n_logits, n_vocab), is a view into llama.cpp's output buffer: no copy,
        valid until the next decode. Rows without a request cost llama.cpp no output work.
        """
        if len(tokens) > self.room():
            raise ContextFullError(
                f"the context is full ({self.n_ctx} tokens); start a new chat or raise --ctx"
            )
        most = min(len(tokens), self.n_batch, MAX_LOGIT_ROWS)
        if not 1 <= n_logits <= most:
            raise ValueError(f"n_logits must be 1..{most}, not {n_logits}")
        head, tail = tokens[: len(tokens) - n_logits], tokens[len(tokens) - n_logits :]
        for start in range(0, len(head), self.n_batch):
            self._decode(head[start : start + self.n_batch], n_logits=0)
        self._decode(tail, n_logits=n_logits)
        first = llama_cpp.llama_get_logits_ith(self._ctx, -n_logits)
        return np.ctypeslib.as_array(first, shape=(n_logits, self.n_vocab))

    def _decode(self, tokens: Sequence[int], *, n_logits: int) -> None:
        """One llama_decode of at most n_batch tokens; logits for the last `n_logits` rows."""
        batch = self._batch
        base = len(self.cached)
        n = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = base + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= n - n_logits
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status == 1:
            raise ContextFullError(
                f"no room left in the context ({self.n_ctx} tokens); start a new chat or raise --ctx"
            )
        if status != 0:
            raise ModelLoadError(f"llama_decode failed with status {status} on {self.path.name}")
        self.cached.extend(tokens)


def _progress_callback(report: ProgressCallback, cancelled: list[bool]) -> llama_cpp.llama_progress_callback:
    """Wrap `report` for llama.cpp; a False from it stops the load and is noted in `cancelled`."""

    def on_progress(fraction: float, _user_data: ctypes.c_void_p) -> bool:
        if report(float(fraction)) is False:
            cancelled.append(True)
            return False
        return True

    return llama_cpp.llama_progress_callback(on_progress)
