"""The draft-model drafter: a small GGUF that shares the target's tokenizer proposes tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spectui.engine import sampling
from spectui.engine.config import SamplingConfig
from spectui.engine.drafters.base import Proposal
from spectui.engine.model import LlamaModel
from spectui.engine.sampling import Dist

# How llama.cpp's draft measures its confidence when drafting greedily: softmax over its top 10.
GREEDY_CONFIDENCE = SamplingConfig(temperature=1.0, top_k=10, top_p=1.0, min_p=0.0)


def known_stand_in(model: LlamaModel) -> int:
    """The draft's token for a space: what it reads in place of a token only the target has."""
    tokens = model.tokenize(" ")
    return tokens[0] if tokens else 0


def readable(context: Sequence[int], n_vocab: int, stand_in: int) -> Sequence[int]:
    """The context as a draft with `n_vocab` tokens can decode it.

    A target may have a few more tokens than its draft (padded vocabularies: Qwen2.5-7B has 152064,
    its 0.5B draft 151936). The draft never proposes those ids (it picks from its own logits), but
    the target may write one, and llama.cpp refuses to decode an id past the vocabulary
    (`llama_batch_allocr::init`, src/llama-batch.cpp:79). The draft reads a stand-in instead: its
    proposals after it may be worse, but the target verifies every one, so the output is unchanged.
    """
    if not context or max(context) < n_vocab:
        return context
    return [token if token < n_vocab else stand_in for token in context]


class DraftModelProposer:
    """Proposes tokens from a small draft model's own distribution q."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._stand_in = known_stand_in(model)

    def prefill(self, context: Sequence[int]) -> None:
        self.model.sync(readable(context, self.model.n_vocab, self._stand_in))

    def propose(self, context: Sequence[int], k: int, cfg: SamplingConfig,
                rng: np.random.Generator, p_min: float) -> Proposal:
        proposal = Proposal()
        k = min(k, self.model.room() - 1)
        if k <= 0:
            return proposal
        context = readable(context, self.model.n_vocab, self._stand_in)
        # Catch up: decode whatever the draft has not seen (at least the last token).
        proposal.caught_up = len(context) - self.model.kept_on_sync(context)
        logits = self.model.sync(context)
        proposal.decodes = 1
        while True:
            token, dist, confidence = self._choose(logits, cfg, rng, p_min)
            if confidence < p_min:
                break  # unsure: a likely rejection costs more than it saves
            proposal.tokens.append(token)
            proposal.dists.append(dist)
            proposal.confidences.append(confidence)
            if len(proposal.tokens) == k or self.model.is_eog(token):
                break
            logits = self.model.extend([token])[0]
            proposal.decodes += 1
        return proposal

    @staticmethod
    def _choose(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator,
                p_min: float) -> tuple[int, Dist | None, float]:
        if cfg.greedy:
            confidence = 1.0
            if p_min > 0.0:
                confidence = sampling.distribution(logits, GREEDY_CONFIDENCE).top_prob()
            return sampling.greedy(logits), None, confidence
        q = sampling.distribution(logits, cfg)
        return sampling.sample(q, rng), q, q.top_prob()

    def reset(self) -> None:
        self.model.reset()

    def close(self) -> None:
        self.model.close()
