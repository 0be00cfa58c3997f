"""The speculative step for a token tree: several candidates per position, one target pass.

The tree hangs below `last` (the context's newest token, not yet decoded by the target). The
target decodes `last` and every node in ONE pass (`LlamaModel.verify_tree`): row 0 is `last`,
row i + 1 is node i, each at position len(cache) + depth, each seeing only its ancestors, so row
r is p( . | context, the path to r). Then the cache keeps the accepted path only (`keep_branch`).

The rule is recursive rejection sampling: SpecInfer's multi-step speculative sampling (Miao et
al. 2024) with the children of a node drawn *without replacement* (Jeon et al. 2024, "Recursive
speculative decoding"). At a node, p is the target's processed distribution at its row. Its
children are tried in the order they were drawn; child c_j came from q_j, the drafter's q given
c_1..c_{j-1} (without replacement: q with them removed and renormalized; a deterministic child,
a point mass):

    accept c_j with probability min(1, p(c_j) / q_j(c_j))    -> go down to c_j
    else p <- normalize(max(0, p - q_j))                      -> try c_{j+1}
    no child left: the target's token is a draw from p (after a full path, the bonus token).

Why it is exact. One try is the single-draft rule: with any q it emits a token distributed as
p, c_j on acceptance, else a draw from the residual. Trying c_{j+1} instead of drawing from the
residual at once is the single-draft rule again, with the residual as the target and q_{j+1} as
the proposal: c_{j+1} was drawn from q_{j+1} whatever the coin that rejected c_j said. By
induction over the siblings the token taken at a node is distributed as p, and by induction
over depth so is every emitted token. Without the update of p (each sibling judged against the
original p) the tokens a drafter likes come out too often: tests/test_tree.py catches that.

Why without replacement: a child drawn twice is useless, since after its rejection the residual
gives it probability 0 (it was rejected only because q > p there). Without replacement every
sibling is a new token, so a given number of verify rows covers more of p.

Greedy (T = 0): at each row follow the child equal to the target's argmax (its logits with the
request's logit bias added, as everywhere else); where none is, the argmax is the target's token.
That is the longest path the target agrees with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.step import sampling
from spectui.engine.step.drafter import Proposal
from spectui.engine.step.target import StepTarget

AcceptRule = Callable[[float, float, float], bool]
"""Accept a draft token d given p(d), q(d) and u ~ Uniform[0, 1): the step's rule
(`speculative.accept_draft_token`), handed in by the step so that a chain and a tree are judged
by one rule (and a test that swaps the rule swaps it for both)."""


def verify(target: StepTarget, last: int, proposal: Proposal, cfg: SamplingConfig,
           rng: np.random.Generator, accept: AcceptRule) -> tuple[list[int], int]:
    """One target pass over `last` and the tree, the walk, the cache kept for the accepted path.
    Returns the accepted nodes (indices in proposal.tokens, root first) and the target's token."""
    tokens = [last, *proposal.tokens]
    rows = target.verify_tree(tokens, [-1, *(parent + 1 for parent in proposal.parents)])
    path, extra = walk(proposal, rows, cfg, rng, accept)
    target.keep_branch(tokens, [0, *(node + 1 for node in path)])
    return path, extra


def walk(proposal: Proposal, rows: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator,
         accept: AcceptRule) -> tuple[list[int], int]:
    """The rule above, over the target's rows (row 0: `last`; row i + 1: node i)."""
    children = children_of(proposal.parents)
    path: list[int] = []
    node = -1
    while True:
        logits, kids = rows[node + 1], children.get(node, ())
        if cfg.greedy:
            best = sampling.greedy(logits, cfg)  # the logit bias's argmax, as the chain's (and K = 0's)
            node = next((c for c in kids if proposal.tokens[c] == best), -1)
            if node < 0:
                return path, best
        else:
            node, p = -1, sampling.distribution(logits, cfg)
            for child in kids:
                d = proposal.tokens[child]
                q = proposal.dists[child] or sampling.point_mass(d)
                if accept(p.prob(d), q.prob(d), rng.random()):
                    node = child
                    break
                p = sampling.residual(p, q)  # the next sibling (or the last draw) faces what is left
            if node < 0:
                return path, sampling.sample(p, rng)
        path.append(node)


def children_of(parents: Sequence[int]) -> dict[int, list[int]]:
    """Each node's children in the order they were drawn (-1: the children of `last`)."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    return children
