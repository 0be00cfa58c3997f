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


class DraftModelProposer:
    """Proposes tokens from a small draft model's own distribution q."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model

    def prefill(self, context: Sequence[int]) -> None:
        self.model.sync(context)

    def propose(self, context: Sequence[int], k: int, cfg: SamplingConfig,
                rng: np.random.Generator, p_min: float) -> Proposal:
        proposal = Proposal()
        k = min(k, self.model.room() - 1)
        if k <= 0:
            return proposal
        # Catch up: decode whatever the draft has not seen (at least the last token).
        proposal.caught_up = len(context) - self.model.kept_on_sync(context)
        logits = self.model.catch_up(context)
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
