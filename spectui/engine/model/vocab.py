"""What a loaded model says about itself and its vocabulary: GGUF metadata, special tokens,
text <-> tokens. A mixin of `LlamaModel`, which provides the llama.cpp handles."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import llama_cpp


class ModelVocabulary:
    """Metadata and tokenizer calls on llama.cpp's model (`_model`) and vocabulary (`_vocab`)."""

    path: Path
    _model: llama_cpp.llama_model_p | None
    """None once closed."""
    _vocab: llama_cpp.llama_vocab_p

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
    def vocab_type(self) -> int:
        return int(llama_cpp.llama_vocab_type(self._vocab))

    @property
    def bos_id(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self._vocab))

    @property
    def eos_id(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self._vocab))

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
