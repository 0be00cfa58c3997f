"""Can this draft propose tokens for this target? llama.cpp's rules, with a reason on refusal.

The rules are those of llama.cpp's `common_speculative_are_compatible` (common/speculative.cpp:
67-129): the same vocabulary type; the same BOS/EOS add-flags, and the same BOS/EOS ids where a
flag is set; vocabulary sizes within 128 of each other (padded vocabularies differ a little); and
the same text for every token from id 5 on. The error names the first mismatch, e.g.
"token 151665: '<tool_call>' vs '<|im_end|>'".

One rule is stricter than llama.cpp's: the draft may not have *more* tokens than the target. The
draft proposes from its own logits, so any of its ids can come up, and llama.cpp refuses to decode
an id past the target's vocabulary (src/llama-batch.cpp:79, "invalid token": `llama_decode`
returns -1). The other way round is fine: the draft never proposes an id it does not have, and a
target-only id the target itself writes is read by the draft as a stand-in
(`spectui.engine.drafters.model.readable`).
"""

from __future__ import annotations

from typing import Protocol

from spectui.errors import IncompatibleDraftError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN = 5


class Vocabulary(Protocol):
    """What the check reads from a model (a `LlamaModel` loaded with or without weights)."""

    @property
    def n_vocab(self) -> int: ...
    @property
    def vocab_type(self) -> int: ...
    @property
    def add_bos(self) -> bool: ...
    @property
    def add_eos(self) -> bool: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    def token_text(self, token: int) -> str: ...


def first_mismatch(target: Vocabulary, draft: Vocabulary) -> str | None:
    """A short description of the first rule the pair breaks, or None when compatible."""
    if target.vocab_type != draft.vocab_type:
        return f"vocabulary type {target.vocab_type} vs {draft.vocab_type}"
    if target.add_bos != draft.add_bos:
        return f"add-BOS flag {target.add_bos} vs {draft.add_bos}"
    if target.add_eos != draft.add_eos:
        return f"add-EOS flag {target.add_eos} vs {draft.add_eos}"
    if target.add_bos and target.bos_id != draft.bos_id:
        return f"BOS id {target.bos_id} vs {draft.bos_id}"
    if target.add_eos and target.eos_id != draft.eos_id:
        return f"EOS id {target.eos_id} vs {draft.eos_id}"
    if draft.n_vocab > target.n_vocab:
        extra = draft.n_vocab - target.n_vocab
        ids = f"id {target.n_vocab}" if extra == 1 else f"ids {target.n_vocab}..{draft.n_vocab - 1}"
        return (f"the draft has {draft.n_vocab} tokens and the target {target.n_vocab}: the draft "
                f"could propose token {ids}, which the target cannot score")
    gap = target.n_vocab - draft.n_vocab
    if gap > MAX_VOCAB_SIZE_DIFFERENCE:
        return f"vocabulary size {target.n_vocab} vs {draft.n_vocab} (differ by {gap} > {MAX_VOCAB_SIZE_DIFFERENCE})"
    for token in range(FIRST_COMPARED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        a, b = target.token_text(token), draft.token_text(token)
        if a != b:
            return f"token {token}: {a!r} vs {b!r}"
    return None


def check_compatible(target: Vocabulary, draft: Vocabulary, *, target_name: str = "target",
                     draft_name: str = "draft") -> None:
    """Raise `IncompatibleDraftError` naming the first mismatch."""
    mismatch = first_mismatch(target, draft)
    if mismatch is not None:
        raise IncompatibleDraftError(
            f"draft {draft_name} does not share the tokenizer of target {target_name} ({mismatch}); "
            "pick a draft from the same model family and generation"
        )
