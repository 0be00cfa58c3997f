"""Synthetic cycles for K = auto (`AutoDraft`): one step's result, and a run of cycles accepted
at a given rate (`test_autodraft`, `test_budget`, `test_lookup_gate`)."""

from __future__ import annotations

import numpy as np

from spectui.engine.planning.autodraft import AutoDraft
from spectui.engine.step.drafter import Proposal
from spectui.engine.step.speculative import StepResult

MODEL = "model"


def step(drafted: int, accepted: int, draft_s: float, verify_s: float, work: int,
         caught_up: int = 1, source: str = MODEL, confidence: float = 0.8) -> StepResult:
    proposal = Proposal(list(range(drafted)), [None] * drafted, [confidence] * drafted, source, work, caught_up)
    return StepResult(list(range(accepted + 1)), proposal, accepted, draft_s, verify_s)


def feed_cycles(auto: AutoDraft, accept_rate: float, draft_s: float, verify_s: float, n: int = 40,
                source: str = MODEL, work_per_token: int = 1, call_s: float = 0.0) -> None:
    """Cycles whose token i is accepted with `accept_rate` (given the ones before it were)."""
    rng = np.random.default_rng(0)
    for _ in range(n):
        k = max(auto.k(source), 1)
        accepted = 0
        while accepted < k and rng.random() < accept_rate:
            accepted += 1
        auto.observe(step(k, accepted, call_s + draft_s * k, verify_s * (1 + 0.1 * k),
                          work=work_per_token * k, source=source))
