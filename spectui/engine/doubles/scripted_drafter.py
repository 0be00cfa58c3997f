"""A drafter that proposes whatever a script says: for tests of the step and of any future drafter.

Like simonw/llm's `MockModel`, it stands in for the part under test (the proposer) beside the real
thing (a real target on real llama.cpp), so acceptance, rollback and the point-mass path (q = None)
can be checked with proposals the test chooses: the target's own greedy tokens, deliberate misses,
or draws from a chosen distribution q. A script that names parents proposes a token tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.step.drafter import Budget, Feedback, Proposal
from spectui.engine.step.sampling import Dist

Script = Callable[[Sequence[int], int], Sequence[int] | Sequence[tuple[int, Dist | None]]
                  | Sequence[tuple[int, Dist | None, int]]]
"""(context, k) -> up to k tokens, or (token, q) pairs where q is the distribution it came from, or
(token, q, parent) triples: a tree (parent: an earlier item's index, -1 for the context; each
q the one the token was drawn from given its earlier siblings)."""


class ScriptedDrafter:
    def __init__(self, script: Script, source: str = "scripted", max_k: int = 16) -> None:
        self.script = script
        self.source = source
        self.label = f"scripted drafter ({source})"
        self.max_k = max_k
        self.feedbacks: list[Feedback] = []
        """Every verdict the step handed back, in order (tests read them)."""

    def prefill(self, context: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
                rng: np.random.Generator) -> Proposal:
        proposal = Proposal(source=self.source)
        k = budget.k(self.source)
        if k <= 0:
            return proposal
        for item in list(self.script(list(context), k))[:k]:
            token, dist, parent = (*item, None)[:3] if isinstance(item, tuple) else (item, None, None)
            proposal.add(int(token), dist, parent=parent)
        return proposal

    def feedback(self, result: Feedback) -> None:
        self.feedbacks.append(result)

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass
