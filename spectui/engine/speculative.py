"""The speculative step: the draft proposes, the target verifies all of it in one pass.

Notation (Leviathan et al. 2023; Chen et al. 2023): p is the target's processed next-token
distribution, q the draft's. The context ends with `last`, the newest token, which the target has
not decoded yet; its cache holds everything before it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spectui.engine import sampling
from spectui.engine.config import SamplingConfig
from spectui.engine.drafters.base import Proposal, Proposer
from spectui.engine.model import LlamaModel


@dataclass(frozen=True)
class StepResult:
    tokens: list[int]
    """The accepted draft tokens, then one token from the target (correction or bonus)."""
    drafted: int
    accepted: int
    draft_seconds: float
    verify_seconds: float
    draft_decodes: int = 0
    draft_confidences: tuple[float, ...] = ()
    draft_caught_up: int = 0


def accept_draft_token(p_d: float, q_d: float, u: float) -> bool:
    """Accept d with probability min(1, p(d)/q(d)); u ~ Uniform[0, 1).

    Written as u·q(d) < p(d) so q(d) = 0 never divides. This rule, with resampling from
    normalize(max(0, p - q)) on rejection, makes every emitted token distributed exactly as p.
    """
    return u * q_d < p_d


def speculative_step(
    target: LlamaModel,
    proposer: Proposer | None,
    context: Sequence[int],
    k: int,
    cfg: SamplingConfig,
    rng: np.random.Generator,
    p_min: float = 0.0,
) -> StepResult:
    """One cycle: up to k draft tokens, one target pass, acceptance, KV rollback."""
    t0 = time.perf_counter()
    # 1. The draft proposes d_1..d_n (n <= k) from q (argmax at T = 0).
    proposal = proposer.propose(context, k, cfg, rng, p_min) if proposer and k > 0 else Proposal()
    drafted = proposal.tokens
    t1 = time.perf_counter()
    # 2. The target scores [last, d_1..d_n] in ONE decode: row i is p( . | context, d_1..d_i).
    n_cached = len(context) - 1
    target.truncate(n_cached)
    logits = target.extend([context[-1], *drafted], n_logits=len(drafted) + 1)
    # 3. Walk the draft; stop at the first rejection.
    accepted, extra = 0, None
    for i, d in enumerate(drafted):
        if cfg.greedy:
            # T = 0: accept iff the draft token is the target's argmax, else take the argmax.
            best = sampling.greedy(logits[i])
            if best != d:
                extra = best
                break
        else:
            # T > 0: rejection sampling against the draft's own q (a point mass if it has none).
            p = sampling.distribution(logits[i], cfg)
            q = proposal.dists[i] or sampling.point_mass(d)
            if not accept_draft_token(p.prob(d), q.prob(d), rng.random()):
                # Rejected: sample from the residual normalize(max(0, p - q)).
                extra = sampling.sample(sampling.residual(p, q), rng)
                break
        accepted += 1
    if extra is None:
        # All n accepted: the target's row n gives a bonus token for free.
        extra = pick(logits[len(drafted)], cfg, rng)
    # 4. Roll back: the target keeps last + the accepted prefix; the new token stays pending.
    target.truncate(n_cached + 1 + accepted)
    t2 = time.perf_counter()
    return StepResult([*drafted[:accepted], extra], len(drafted), accepted, t1 - t0, t2 - t1,
                      proposal.decodes, tuple(proposal.confidences), proposal.caught_up)


def pick(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator) -> int:
    """The target's own choice: argmax at T = 0, else a draw from its processed distribution."""
    if cfg.greedy:
        return sampling.greedy(logits)
    return sampling.sample(sampling.distribution(logits, cfg), rng)
