"""A GBNF grammar over the target's vocabulary: which tokens may come next.

llama.cpp's grammar sampler (`llama_sampler_init_grammar`, src/llama-sampler.cpp) does the work:
`llama_sampler_apply` sets the logit of every candidate the grammar rejects to -inf
(`llama_grammar_apply_impl`, src/llama-grammar.cpp: an end-of-generation token only once the
grammar is complete), `llama_sampler_accept` advances its stacks past a token, and
`llama_sampler_clone` copies the state. Accepting a token the grammar rejects aborts the process
(GGML_ABORT / an exception through the C API), so `accept` is only ever called with a token that
`allowed` let through: the target's own choice, or a draft token it accepted.

One `Grammar` lives for one reply (the generator makes it from `SamplingConfig.grammar`); a
drafter that runs a network drafts against a `fork()` it advances along its own proposal, so its
q is constrained like the target's p.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from spectui.engine.llama import llama_log
from spectui.engine.step import grammar_bounds
from spectui.errors import SpectuiError

if TYPE_CHECKING:
    from spectui.engine.model.llama_model import LlamaModel

ROOT = "root"
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
"""llama.cpp's `llama_token_data`, laid out as numpy builds it (12 bytes, no padding)."""
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class GrammarError(SpectuiError):
    """A grammar llama.cpp cannot parse (the line says where, from llama.cpp's own log)."""


class Grammar:
    """llama.cpp's grammar sampler state; `allowed`, `accept`, `fork` and `close` as in
    `engine.config.TokenConstraint`."""

    def __init__(self, handle: llama_cpp.llama_sampler_p, n_vocab: int, triggers: frozenset[int] = frozenset(),
                 awake: bool = True) -> None:
        self._handle: llama_cpp.llama_sampler_p | None = handle
        """None once closed."""
        self._n_vocab = n_vocab
        self._triggers = triggers
        self._awake = awake
        """False for a lazy grammar until one of its triggers is accepted (llama.cpp's
        `awaiting_trigger`, which its API does not expose, followed here)."""

    @classmethod
    def compile(cls, model: LlamaModel, gbnf: str, root: str = ROOT, triggers: tuple[int, ...] = ()) -> Grammar:
        """Parse `gbnf` against `model`'s vocabulary; `GrammarError` with llama.cpp's reason, and
        `GrammarTooLarge` (before llama.cpp sees it) for one past `grammar_bounds`'s limits.

        With `triggers` the grammar is lazy (`llama_sampler_init_grammar_lazy_patterns`, token
        triggers only): it allows every token until one of them is accepted, and holds from that
        token on, so the grammar's text must begin with the trigger's. Text patterns are not used:
        llama.cpp replays the text after a pattern into the grammar and aborts when it does not
        fit, which a token trigger whose text opens the grammar never meets."""
        gbnf = grammar_bounds.check(gbnf)
        seen = llama_log.mark()
        text, start = gbnf.encode("utf-8"), root.encode("utf-8")
        if triggers:
            tokens = (llama_cpp.llama_token * len(triggers))(*triggers)
            handle = grammar_bounds.on_parser_stack(
                lambda: llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                    model.vocab_handle, text, start, None, 0, tokens, len(triggers)))
        else:
            handle = grammar_bounds.on_parser_stack(
                lambda: llama_cpp.llama_sampler_init_grammar(model.vocab_handle, text, start))
        if not handle:
            said = [line.strip() for line in llama_log.since(seen) if line.strip()]
            reason = said[0] if said else "llama.cpp could not parse it"
            raise GrammarError(f"the grammar is not valid GBNF: {reason}")
        return cls(handle, model.n_vocab, frozenset(triggers), awake=not triggers)

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """True for each of `ids` the grammar lets come next (ids past the target's vocabulary,
        which a draft's padded vocabulary may have, never are)."""
        ids = np.asarray(ids)
        mask = ids < self._n_vocab
        asked = ids[mask]
        if asked.size == 0:
            return mask
        data = np.zeros(asked.size, dtype=TOKEN_DATA)
        data["id"] = asked
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
            size=asked.size, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._handle, ctypes.byref(array))
        mask[mask] = np.isfinite(data["logit"])
        return mask

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._handle, int(token))
        self._awake = self._awake or token in self._triggers

    def fork(self) -> Grammar:
        return Grammar(llama_cpp.llama_sampler_clone(self._handle), self._n_vocab, self._triggers, self._awake)

    def sleeps_through(self, tokens: Sequence[int]) -> bool:
        return not self._awake and not any(int(t) in self._triggers for t in tokens)

    def close(self) -> None:
        if self._handle:
            llama_cpp.llama_sampler_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()
