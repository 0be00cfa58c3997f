"""The speculative step: a drafter proposes, the target verifies all of it in one pass.

Notation (Leviathan et al. 2023; Chen et al. 2023): p is the target's processed next-token
distribution, q the drafter's (a point mass, q(d) = 1, for a deterministic proposal such as a
lookup). The context ends with `last`, the newest token, which the target has not decoded yet; its
cache holds everything before it. A proposal that is a token tree (several candidates for a
position) takes tree.py's path: the same rule, tried on each node's children in turn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from spectui.engine.events import TokenLogprob
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.llama import hostcost
from spectui.engine.step import sampling, tree
from spectui.engine.step.drafter import Budget, Drafter, Feedback, Proposal
from spectui.engine.step.target import StepTarget


@dataclass(frozen=True)
class StepResult:
    tokens: list[int]
    """The accepted draft tokens, then one token from the target (correction or bonus)."""
    proposal: Proposal
    accepted: int
    draft_seconds: float
    """Proposing, plus the drafter's handling of the verdict."""
    verify_seconds: float
    host: hostcost.HostCost = field(default_factory=hostcost.HostCost)
    """The host's seconds by part, outside llama.cpp's compute calls (and llama.cpp's beside them)."""
    logprobs: tuple[TokenLogprob, ...] = ()
    """Each emitted token's log-probability under the target (when asked for)."""
    path: tuple[int, ...] = ()
    """For a token tree: the accepted nodes (indices in proposal.tokens), root first."""

    @property
    def drafted(self) -> int:
        """Tokens the target verified: a chain's length, or a tree's nodes."""
        return len(self.proposal.tokens)

    @property
    def branches(self) -> int:
        """Leaves of the proposal (1 for a chain)."""
        return self.proposal.leaves()


def accept_draft_token(p_d: float, q_d: float, u: float) -> bool:
    """Accept d with probability min(1, p(d)/q(d)); u ~ Uniform[0, 1).

    Written as u·q(d) < p(d) so q(d) = 0 never divides. This rule, with resampling from
    normalize(max(0, p - q)) on rejection, makes every emitted token distributed exactly as p.
    """
    return u * q_d < p_d


def speculative_step(
    target: StepTarget,
    drafter: Drafter | None,
    context: Sequence[int],
    budget: Budget,
    cfg: SamplingConfig,
    rng: np.random.Generator,
    logprobs: int | None = None,
) -> StepResult:
    """One cycle: a proposal of up to budget.k tokens, one target pass, acceptance, rollback.

    `cfg` carries the reply's logit bias and grammar (`cfg.constraint`, at the end of the
    context): p is computed after both, row by row, the grammar advanced past each token as it
    is accepted, so p at row i is the constrained distribution after d_1..d_i. `logprobs`
    (None: none) asks for each emitted token's log-probability and that many alternatives.
    """
    t0, laps = time.perf_counter(), hostcost.Laps()
    # 1. The drafter proposes d_1..d_n (n <= k), each from its q (or deterministically).
    proposal = _propose(drafter, context, budget, cfg, rng)
    asleep = proposal.is_tree and cfg.constraint is not None and cfg.constraint.sleeps_through(proposal.tokens)
    constrained = cfg.constraint is not None and not asleep
    if proposal.is_tree and (not target.can_verify_trees or constrained or logprobs is not None):
        # a hybrid target, a grammar or log-probabilities asked for: the tree's first-choice chain
        # (a lazy grammar no node wakes allows every token at every node: the tree stays)
        proposal = proposal.pruned_to_chain()
    drafted = proposal.tokens
    t1 = time.perf_counter()
    laps.lap("draft")
    n_cached = len(context) - 1
    target.truncate(n_cached)
    if proposal.is_tree:
        # 2-4 for a token tree (tree.py): one decode of last and every node, the same rule tried
        # on each node's children in turn, the cache kept for the accepted path.
        path, token = tree.verify(target, context[-1], proposal, cfg, rng, accept_draft_token)
        if cfg.constraint is not None:  # asleep through the path; the last token may wake it
            for i in path:
                cfg.constraint.accept(proposal.tokens[i])
            cfg.constraint.accept(token)
        laps.lap("sampling")
        return _finish(drafter, context, proposal, path, token, (t0, t1, time.perf_counter()), laps)
    # 2. The target scores [last, d_1..d_n] in ONE decode: row i is p( . | context, d_1..d_i).
    logits = target.extend([context[-1], *drafted], n_logits=len(drafted) + 1)
    laps.lap("bookkeeping")
    # 3. Walk the proposal; stop at the first rejection.
    grammar = cfg.constraint
    accepted, extra = 0, None
    for i, d in enumerate(drafted):
        if cfg.greedy:
            # T = 0: accept iff the draft token is the target's argmax, else take the argmax.
            best = sampling.greedy(logits[i], cfg)
            if best != d:
                extra = best
                break
        else:
            # T > 0: accept d with min(1, p(d)/q(d)); q(d) = 1 for a deterministic proposal.
            p = sampling.distribution(logits[i], cfg)
            q = proposal.dists[i] or sampling.point_mass(d)
            if not accept_draft_token(p.prob(d), q.prob(d), rng.random()):
                # Rejected: sample from the residual normalize(max(0, p - q)) (for a point mass:
                # p with d removed).
                extra = sampling.sample(sampling.residual(p, q), rng)
                break
        accepted += 1
        if grammar is not None:
            grammar.accept(d)  # p(d) > 0: the grammar allows d, and row i+1 follows it
    if extra is None:
        # All n accepted: the target's row n gives a bonus token for free.
        extra = pick(logits[len(drafted)], cfg, rng)
    if grammar is not None:
        grammar.accept(extra)
    emitted = [*drafted[:accepted], extra]
    # Row j scored emitted token j; read before the rollback (a re-read would overwrite the rows).
    scored = tuple(token_logprob(logits[j], token, logprobs) for j, token in enumerate(emitted)) \
        if logprobs is not None else ()
    laps.lap("sampling")
    # 4. Roll back: the target keeps last + the accepted prefix; the new token stays pending.
    target.truncate(n_cached + 1 + accepted)
    return _finish(drafter, context, proposal, range(accepted), extra, (t0, t1, time.perf_counter()), laps, scored)


def _propose(drafter: Drafter | None, context: Sequence[int], budget: Budget, cfg: SamplingConfig,
             rng: np.random.Generator) -> Proposal:
    """The drafter's proposal; under a grammar it drafts against its own copy of the state."""
    if drafter is None:
        return Proposal()
    if cfg.constraint is None:
        return drafter.propose(context, budget, cfg, rng)
    fork = cfg.constraint.fork()
    try:
        return drafter.propose(context, budget, replace(cfg, constraint=fork), rng)
    finally:
        fork.close()


def _finish(drafter: Drafter | None, context: Sequence[int], proposal: Proposal, path: Sequence[int],
            extra: int, times: tuple[float, float, float], laps: hostcost.Laps,
            scored: tuple[TokenLogprob, ...] = ()) -> StepResult:
    """5. Tell the drafter (it may read the target's kept rows, or learn from the verdict)."""
    t0, t1, t2 = times
    laps.lap("rollback")
    emitted = [*(proposal.tokens[i] for i in path), extra]
    if drafter is not None and proposal.tokens:
        drafter.feedback(Feedback(context, proposal, len(path), emitted, len(proposal.tokens) + 1,
                                  tuple(path) if proposal.is_tree else ()))
    t3 = time.perf_counter()
    laps.lap("draft")
    return StepResult(emitted, proposal, len(path), (t1 - t0) + (t3 - t2), t2 - t1, laps.cost(), scored,
                      tuple(path) if proposal.is_tree else ())


def pick(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator) -> int:
    """The target's own choice: argmax at T = 0, else a draw from its processed distribution
    (both after the logit bias and the grammar)."""
    if cfg.greedy:
        return sampling.greedy(logits, cfg)
    return sampling.sample(sampling.distribution(logits, cfg), rng)


def token_logprob(logits: np.ndarray, token: int, n_top: int) -> TokenLogprob:
    """`token`'s log-probability under the target's raw distribution at this row."""
    logprob, top = sampling.token_logprobs(logits, token, n_top)
    return TokenLogprob(token, logprob, top)
