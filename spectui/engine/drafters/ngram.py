"""Prompt lookup (`--drafter ngram`): copy what followed the context's last n tokens earlier on.

The context's last n tokens (n from 5 down to 2) are looked up in the prompt and the reply so far
(`PromptLookup`, an incremental hash-chain index: a few appends per cycle); what followed their
most recent earlier occurrence is proposed, as llama.cpp's `ngram-simple`
(`common_ngram_simple_draft`, common/ngram-map.cpp) and vLLM's `ngram` do. It needs no draft
model and no forward pass (`Proposal.work = 0`), so K = auto prices it as free.

Each proposed token is a point mass (q = None): at T > 0 the step accepts it with p(d) and
otherwise resamples from p with d removed, so sampling stays exact. The proposal's length and
whether to propose at all follow `lookup_gate`: acceptance estimates from how consistent the
earlier occurrences were, calibrated per n-gram length by what the target accepted, weighed
against the extra verify rows (alone) or against the draft model behind it (`model+ngram`).

Memory: about 29 bytes per context token (the token store, four hash chains for n = 2..5, and a
list mirror) plus 256 KB of chain heads for the first 16k tokens; nothing outlives the context.
"""

from __future__ import annotations

from collections.abc import Sequence

from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.lookup_base import Candidate, LookupDrafter
from spectui.engine.drafters.lookup_gate import MIN_TOKEN_PROB
from spectui.engine.drafters.ngram_lookup import PromptLookup
from spectui.engine.drafters.spec import BuildContext, DrafterSpec

SOURCE = "ngram"
KIND = KINDS[SOURCE]
MIN_NGRAM, MAX_NGRAM = 2, 5


class NgramDrafter(LookupDrafter):
    """Proposes the continuation of the most recent earlier occurrence of the context's end."""

    source = SOURCE
    label = KIND.label
    max_k = KIND.max_k

    def __init__(self, lookup: PromptLookup | None = None, *, gated: bool = True,
                 min_token_prob: float = MIN_TOKEN_PROB) -> None:
        super().__init__(gated=gated, min_token_prob=min_token_prob)
        self.lookup = lookup or PromptLookup(MIN_NGRAM, MAX_NGRAM)

    def prefill(self, context: Sequence[int]) -> None:
        super().prefill(context)
        self.lookup.prefill(context)

    def find(self, context: list[int], k: int) -> Candidate | None:
        """The lookup's match; its evidence is the share of the n-gram's earlier occurrences that
        the proposed first token followed (one copied stretch says nothing more per token)."""
        match = self.lookup.lookup(context, k)
        if match is None:
            return None
        return Candidate(match.tokens, [match.consistency] * len(match.tokens), match.ngram)

    def reset(self) -> None:
        super().reset()
        self.lookup.reset()


def build(spec: DrafterSpec, ctx: BuildContext) -> NgramDrafter:
    return NgramDrafter()
