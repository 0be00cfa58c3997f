"""Vocabulary compatibility between local files, with each vocabulary loaded at most once.

A fingerprint (`VocabPrint`: the flags llama.cpp compares and a digest of the token texts) is
taken from a vocab-only load (no weights: `src/llama.cpp` returns before `load_tensors` when
`vocab_only` is set) and cached by file identity. Two files with equal fingerprints are
compatible without looking further; flags that differ are refused from the fingerprints alone;
only fingerprints that agree on the flags but not on the tokens need the token-by-token check
(`spectui.engine.files.compat.first_mismatch`, llama.cpp's rule), and its verdict is cached by the
pair of fingerprints, so N models with k distinct vocabularies cost at most k(k-1) such checks,
once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from spectui.catalog.local.index import LocalIndex, VocabPrint
from spectui.engine.files.compat import FIRST_COMPARED_TOKEN, first_mismatch
from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from spectui.engine.model.llama_model import LlamaModel


def fingerprint_of(model: LlamaModel) -> VocabPrint:
    digest = hashlib.sha256()
    for token in range(FIRST_COMPARED_TOKEN, model.n_vocab):
        digest.update(model.token_text(token).encode("utf-8", errors="surrogatepass"))
        digest.update(b"\0")
    return VocabPrint(
        vocab_type=model.vocab_type, n_vocab=model.n_vocab, add_bos=model.add_bos, add_eos=model.add_eos,
        bos_id=model.bos_id, eos_id=model.eos_id, digest=digest.hexdigest(),
    )


class _FileVocabulary:
    """A `compat.Vocabulary` answered from a fingerprint; the token texts load on first need."""

    def __init__(self, vocab: VocabPrint, load: Path, checker: VocabChecker) -> None:
        self.print = vocab
        self.file = load
        self.checker = checker
        self.n_vocab, self.vocab_type = vocab.n_vocab, vocab.vocab_type
        self.add_bos, self.add_eos = vocab.add_bos, vocab.add_eos
        self.bos_id, self.eos_id = vocab.bos_id, vocab.eos_id

    def token_text(self, token: int) -> str:
        return self.checker.loaded(self.file).token_text(token)


class VocabChecker:
    """Compatibility verdicts between files; use as a context manager (it closes what it loaded)."""

    def __init__(self, index: LocalIndex) -> None:
        self.index = index
        self._models: dict[Path, LlamaModel] = {}

    def __enter__(self) -> VocabChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for model in self._models.values():
            model.close()
        self._models.clear()

    def loaded(self, path: Path) -> LlamaModel:
        """The vocab-only load of `path`, kept until `close`."""
        from spectui.engine.model.llama_model import LlamaModel

        key = path.resolve()
        if key not in self._models:
            self._models[key] = LlamaModel.load(path, vocab_only=True)
        return self._models[key]

    def fingerprint(self, path: Path) -> VocabPrint:
        """The cached fingerprint; `SpectuiError` (cached too) when llama.cpp cannot load it."""
        entry = self.index.entry(path)
        if entry.vocab is None and entry.vocab_error is None:
            try:
                entry.vocab = fingerprint_of(self.loaded(path))
            except SpectuiError as error:
                entry.vocab_error = str(error)
            self.index.mark_changed()
        if entry.vocab is None:
            raise SpectuiError(entry.vocab_error or "its vocabulary cannot be read")
        return entry.vocab

    def mismatch(self, target: Path, draft: Path) -> str | None:
        """llama.cpp's first broken rule for this pair (`compat.first_mismatch`), or None."""
        t, d = self.fingerprint(target), self.fingerprint(draft)
        if t.key == d.key:
            return None
        key = f"{t.key}>{d.key}"
        known, cached = self.index.verdict(key)
        if known:
            return cached
        result = first_mismatch(_FileVocabulary(t, target, self), _FileVocabulary(d, draft, self))
        self.index.set_verdict(key, result)
        return result
