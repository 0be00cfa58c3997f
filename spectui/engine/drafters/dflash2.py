"""The DFlash2 drafter: a DFlash block read through the head's candidate selector lattice.

A DFlash2 head (arch `dflash`, `dflash.selector_top_k` = K and the `selector_*` tensors:
src/models/dflash.cpp `build_dflash2_selector`) decodes the block [last, MASK, ...] at n .. n + k
like DFlash, but its graph packs a lattice into the hidden-state output (`t_h_nextn`, one row per
block entry, read unmasked since no entry outputs logits: speculative.cpp:1077, 1203): row i
(i >= 1, naming the token at n + i) holds

    [ c_i,1 .. c_i,K | S_i[1][1..K] | S_i[2][1..K] | ... | S_i[K][1..K] | 0 ... ]

where c_i are the K likeliest tokens of the block row's logits (as floats) and S_i[p][c] =
logit(c_i,c) + the selector's pair score of c_i,c after candidate p of row i - 1 (row 1: after the
anchor, the same for every p). llama.cpp walks it greedily: p_1 = argmax S_1[0], p_i =
argmax S_i[p_{i-1}], drafting c_i,p_i (speculative.cpp:1240-1262).

**q, the distribution each token is drawn from.** Given the candidate drafted at row i - 1 (index
p), d_i is drawn from

    q_i = the reply's processing of the logits that are S_i[p][c] at c_i,c and -inf elsewhere

a distribution over row i's K candidates, conditioned on the context and on d_{i-1} (through p).
At T = 0 it is llama.cpp's walk token for token; at T > 0 it is a chain of proposals, each reported
as drawn, so the step's rejection sampling is exact (a target token outside the K candidates has
q = 0 and is reached through the residual). Confidence for p_min is that distribution's top
probability over the candidates (llama.cpp's softmax at the argmax, :1248-1256).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spectui.engine.drafters.dflash import DFlashDrafter, build_head
from spectui.engine.drafters.feature_head import FeatureHeadContext, not_this_head
from spectui.engine.drafters.model import choose
from spectui.engine.drafters.spec import BuildContext, DrafterSpec
from spectui.engine.drafters.taps import FeatureTaps
from spectui.engine.files.heads import HeadFacts
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Budget, Proposal
from spectui.engine.step.sampling import Dist

SOURCE = "dflash2"


def lattice_logits(row: np.ndarray, top_k: int, predecessor: int, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Row i of the lattice after candidate `predecessor` of row i - 1: (the K candidate ids, the
    logits over the vocabulary that are the pair scores there and -inf elsewhere)."""
    candidates = row[:top_k].astype(np.int64)
    scores = row[top_k + predecessor * top_k : top_k + (predecessor + 1) * top_k]
    logits = np.full(n_vocab, -np.inf, dtype=np.float32)
    logits[candidates] = scores
    return candidates, logits


class DFlash2Drafter(DFlashDrafter):
    """Proposes a block by walking a DFlash2 head's selector lattice."""

    source = SOURCE

    def __init__(self, target: LlamaModel, model: LlamaModel, head: FeatureHeadContext, taps: FeatureTaps,
                 facts: HeadFacts) -> None:
        super().__init__(target, model, head, taps, facts)
        self.top_k = facts.selector_top_k
        self._lattice = np.zeros((0, 0), dtype=np.float32)
        """The last block's lattice rows (`lattice_logits`)."""

    block_output = "none"  # the lattice is in the hidden rows (read unmasked), no logits

    def read_block(self, proposal: Proposal, k: int, context: Sequence[int], budget: Budget,
                   cfg: SamplingConfig, rng: np.random.Generator) -> None:
        self._lattice = self.head.hidden(self.first_row + k)
        super().read_block(proposal, k, context, budget, cfg, rng)

    def choose_row(self, i: int, previous: Sequence[int], cfg: SamplingConfig, rng: np.random.Generator,
                   p_min: float) -> tuple[int, Dist | None, float]:
        """Row i's candidates scored after the one drafted at row i - 1 (row 1: after the anchor,
        the same scores under every index)."""
        predecessor = 0 if i == 1 else int(np.flatnonzero(self._lattice[i - 1][: self.top_k] == previous[-1])[0])
        return choose(lattice_logits(self._lattice[i], self.top_k, predecessor, self.head.n_vocab)[1], cfg, rng,
                      p_min)


# ----- what the registry asks of this kind ------------------------------------------------------


def unavailable(spec: DrafterSpec, ctx: BuildContext) -> str | None:
    return not_this_head(spec, SOURCE)


def build(spec: DrafterSpec, ctx: BuildContext) -> DFlash2Drafter:
    model, head, taps, facts = build_head(spec, ctx, lattice=True)
    return DFlash2Drafter(ctx.target, model, head, taps, facts)
