"""Token trees: one target pass over several candidates per position, still exactly the target.

A scripted drafter (spectui/engine/doubles/scripted_drafter.py) proposes trees the test chooses beside
the real tiny target on real llama.cpp:

- the layout (positions and sequence ids) and the cache: every row of a tree pass is the target's
  evaluation of that row's own path (siblings do not see each other), and after the walk the
  cache holds exactly the accepted path;
- greedy output is the target's own, token for token, for trees of several shapes, and the
  target takes a second or third candidate where the first is wrong;
- at T = 1 and T = 0.8 the emitted tokens follow the target's distribution (chi-square), with
  children drawn with or without replacement, and the same check catches a rule that judges
  every sibling against the target's p instead of what the siblings before it left of p.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest
from lossless import (
    GREEDY,
    PROCESSED,
    PROMPT,
    PURE,
    DrawnFrom,
    chi_square_pvalue,
    greedy_continuation,
    recorded_continuation,
)
from numerics import RowRecorder, assert_same_evaluation, assert_same_or_near_tie

from spectui.engine.doubles.scripted_drafter import ScriptedDrafter
from spectui.engine.events import Finished
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.model.tree_cache import TreeLayout
from spectui.engine.step import sampling, speculative, tree
from spectui.engine.step.drafter import FixedBudget, Proposal
from spectui.limits import MAX_TREE_LEAVES

TREE_STEPS = 2000
"""Steps per chi-square check: the wrong rule below lands near p = 1e-45 at 1,500 steps."""


@pytest.fixture(scope="module")
def target(tiny_pair):
    # One thread: the tiny model gains nothing from two, and a busy machine slows two a lot.
    model = LlamaModel.load(tiny_pair.target, n_ctx=512, tree_seqs=MAX_TREE_LEAVES, n_threads=1)
    yield model
    model.close()


@pytest.fixture(scope="module")
def fresh(tiny_pair):
    """A second copy of the target for fresh evaluations (single sequence, as a chain runs)."""
    model = LlamaModel.load(tiny_pair.target, n_ctx=512)
    yield model
    model.close()


def path_to(parents: list[int], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


# ----- layout ---------------------------------------------------------------------------------

def test_layout_puts_siblings_at_their_parents_depth_plus_one_and_gives_each_leaf_a_sequence():
    #        0        depth 0
    #      / | \
    #     1  2  3     depth 1 (siblings: one position)
    #    / \     \
    #   4   5     6   depth 2
    layout = TreeLayout.of([-1, 0, 0, 0, 1, 1, 3])
    assert layout.depths == [0, 1, 1, 1, 2, 2, 2]
    assert layout.n_seqs == 4  # leaves 4, 5, 2, 6
    assert layout.seqs[4] == [0]  # the path of first children is sequence 0
    assert layout.seqs[1] == [0, 1] and layout.seqs[0] == [0, 1, 2, 3]
    assert layout.seqs[2] == [2] and layout.seqs[6] == [3] and layout.seqs[3] == [3]
    assert TreeLayout.of([-1, 0, 1]).n_seqs == 1  # a chain: one sequence, as today
    with pytest.raises(ValueError):
        TreeLayout.of([-1, 2, 0])  # a parent after its child


def test_a_proposal_names_parents_only_when_it_is_a_tree():
    chain = Proposal()
    for token in (5, 6, 7):
        chain.add(token)
    assert chain.parents == [] and not chain.is_tree and chain.main_chain() == 3
    branched = Proposal()
    branched.add(5, parent=-1)
    branched.add(6)
    branched.add(9, parent=-1)  # a second candidate for the first position
    assert branched.parents == [-1, 0, -1] and branched.is_tree and branched.main_chain() == 2
    assert branched.pruned_to_chain().tokens == [5, 6]


# ----- the target's pass and its cache --------------------------------------------------------

SHAPE = [-1, 0, 0, 0, 1, 1, 2, 4]  # rows: `last`, three candidates, two under the first, ...


def test_every_row_of_a_tree_pass_is_the_evaluation_of_its_own_path(target, fresh):
    context = target.tokenize(PROMPT)
    target.reset()
    target.sync(context[:-1])
    tokens = [context[-1], 40, 41, 42, 43, 44, 45, 46]
    rows = target.verify_tree(tokens, SHAPE).copy()
    target.keep_branch(tokens, [0])
    for row in range(1, len(tokens)):
        path = [tokens[i] for i in path_to(SHAPE, row)]
        expected = fresh.sync([*context[:-1], *path]).copy()
        # What a layout at span positions (each row after the one before) would have computed:
        # the row seeing every earlier row, siblings included.
        span = fresh.sync([*context[:-1], *tokens[: row + 1]]).copy()
        assert_same_evaluation(rows[row], expected, wrong=span if path != tokens[: row + 1] else None)


@pytest.mark.parametrize("kept", [[0], [0, 1], [0, 1, 5], [0, 3], [0, 2, 6]], ids=str)
def test_after_the_walk_the_cache_holds_exactly_the_accepted_path(target, fresh, kept):
    """Whichever branch is kept (sequence 0's or another's), the next pass sees the context and
    that path, nothing of the other branches: its logits are a fresh evaluation's, and far from
    those of a cache that kept another branch."""
    context = target.tokenize(PROMPT)
    target.reset()
    target.sync(context[:-1])
    tokens = [context[-1], 40, 41, 42, 43, 44, 45, 46]
    target.verify_tree(tokens, SHAPE)
    target.keep_branch(tokens, kept)
    path = [tokens[i] for i in kept]
    assert target.cached == [*context[:-1], *path]
    after = target.extend([77]).copy()
    expected = fresh.sync([*context[:-1], *path, 77]).copy()
    other = [0, 2] if kept != [0, 2] and kept[-1] != 2 else [0, 3]
    stale = fresh.sync([*context[:-1], *(tokens[i] for i in other), 77]).copy()
    assert_same_evaluation(after[0], expected, wrong=stale)
    # and the next tree grows from there again
    more = target.verify_tree([5, 6, 7], [-1, 0, 0]).copy()
    target.keep_branch([5, 6, 7], [0, 2])
    assert_same_evaluation(more[2], fresh.sync([*context[:-1], *path, 77, 5, 7]).copy())


def test_a_context_without_sequences_refuses_a_tree_and_the_step_verifies_its_main_chain(tiny_pair, fresh):
    """A single-sequence context (what hybrids keep) verifies the drafter's first-choice chain."""
    context = fresh.tokenize("Hello there, what is in the")
    truth = greedy_continuation(tiny_pair.target, context, 4)
    with pytest.raises(ValueError):
        fresh.verify_tree([1, 2, 3], [-1, 0, 0])

    def script(ctx, k):  # the truth as the main chain, a wrong sibling at each position
        return [(truth[0], None, -1), (truth[1], None, 0), (truth[2], None, 1), ((truth[0] + 1) % 200, None, -1)]

    fresh.reset()
    fresh.sync(context[:-1])
    step = speculative.speculative_step(fresh, ScriptedDrafter(script), context, FixedBudget(4), GREEDY,
                                        np.random.default_rng(0))
    assert not step.proposal.is_tree and step.tokens == truth[:4] and step.accepted == 3


# ----- greedy: the target's own output --------------------------------------------------------

def tree_script(truth: list[int], offset: int, shape: str):
    """Trees around the target's own greedy tokens with deliberate misses, by shape:
    `fan`: three candidates for the first position, the right one last at every other cycle;
    `caterpillar`: a chain, wrong at position 2, with the right token as its sibling there;
    `binary`: two candidates for each of three positions, both expanded at the first (8
    nodes), the right one second."""

    def wrong(token: int) -> int:
        return (token + 1) % 200

    def script(ctx, k):
        start = len(ctx) - offset
        t = truth[start:start + 4]
        if len(t) < 4:
            return list(t)
        if shape == "fan":
            first = [wrong(t[0]), wrong(wrong(t[0])), t[0]] if start % 2 else [t[0], wrong(t[0]), 0]
            right = first.index(t[0])
            return [(first[0], None, -1), (first[1], None, -1), (first[2], None, -1), (t[1], None, right)]
        if shape == "caterpillar":
            return [(t[0], None, -1), (wrong(t[1]), None, 0), (t[2], None, 1), (t[1], None, 0), (t[2], None, 3)]
        nodes: list[tuple[int, None, int]] = []
        frontier = [-1]
        for depth in range(3):  # at each depth the right token under the right node, second
            nxt = []
            for parent in frontier:
                nodes.append((wrong(t[depth]), None, parent))
                nodes.append((t[depth], None, parent))
                nxt += [len(nodes) - 2, len(nodes) - 1]
            frontier = nxt if depth < 1 else nxt[-1:]
        return nodes

    return script


@pytest.mark.parametrize("shape", ["fan", "caterpillar", "binary"])
def test_greedy_output_is_the_targets_for_trees_of_several_shapes(tiny_pair, target, shape):
    prompt = target.tokenize("Hello there, what is in the")
    truth, truth_rows = recorded_continuation(tiny_pair.target, prompt, 40)
    target.reset()
    drafter = ScriptedDrafter(tree_script(truth, len(prompt), shape))
    gen = Generator(target, {"scripted": drafter}, "scripted")
    with RowRecorder(target) as recorder:
        events = list(gen.generate(prompt, GenerationConfig(max_tokens=32, sampling=GREEDY), DraftControl(16)))
    final = events[-1]
    assert isinstance(final, Finished)
    if assert_same_or_near_tie(prompt, truth[:32], truth_rows, final.tokens, recorder.rows, label=shape):
        return  # a GPU's near-tie (checked): the proposals were built around the other reply
    # The right token was not always the first child: the walk went down later siblings.
    trees = [f for f in drafter.feedbacks if f.path]
    assert trees and any(f.path != list(range(len(f.path))) for f in trees)
    assert final.stats.mean_accepted > 2.0


def test_a_greedy_tree_under_a_logit_bias_is_the_biased_targets_output(tiny_pair, target):
    """The walk follows the argmax of the *biased* logits, as the chain and K = 0 do: a tree built
    around the biased greedy reply is that reply, token for token (the CPU backend's tree rows
    are its single rows: `test_every_row_of_a_tree_pass_is_the_evaluation_of_its_own_path`)."""
    prompt = target.tokenize("Hello there, what is in the")
    plain = greedy_continuation(tiny_pair.target, prompt, 12)
    biased = dataclasses.replace(GREEDY, logit_bias=((plain[1], -100.0), (plain[4], -math.inf)))
    config = GenerationConfig(max_tokens=24, sampling=biased)
    target.reset()
    idle = Generator(target, {"scripted": ScriptedDrafter(lambda ctx, k: [])}, "scripted")
    truth = list(_finished(idle.generate(prompt, config, DraftControl(0))).tokens)
    assert truth[:2] != plain[:2] and plain[1] not in truth and plain[4] not in truth  # the bias bites
    target.reset()
    drafter = ScriptedDrafter(tree_script(truth + [0] * 8, len(prompt), "fan"))
    gen = Generator(target, {"scripted": drafter}, "scripted")
    assert list(_finished(gen.generate(prompt, config, DraftControl(16))).tokens) == truth
    assert any(f.path for f in drafter.feedbacks)  # trees were verified, and their paths taken


def _finished(events) -> Finished:  # type: ignore[no-untyped-def]
    *_, final = events
    assert isinstance(final, Finished)
    return final


# ----- sampling: exactly the target's distribution ---------------------------------------------

def draws(q: sampling.Dist, n: int, rng: np.random.Generator, replace: bool) -> list[tuple[int, sampling.Dist]]:
    """n children drawn from q, each with the q it was drawn from."""
    out: list[tuple[int, sampling.Dist]] = []
    left: sampling.Dist | None = q
    for _ in range(n):
        if left is None:
            break
        token = sampling.sample(left, rng)
        out.append((token, left))
        if not replace:
            left = sampling.without(left, [t for t, _ in out])
    return out


def sampled_tree_script(q_root: sampling.Dist, q_deep: sampling.Dist, rng: np.random.Generator, replace: bool):
    """Three children of `last` drawn from q_root, two under the first child and one under the
    second drawn from q_deep (any q is fine as long as the token was drawn from it)."""

    def script(ctx, k):
        nodes: list[tuple[int, sampling.Dist, int]] = []
        top = draws(q_root, 3, rng, replace)
        nodes += [(t, q, -1) for t, q in top]
        nodes += [(t, q, 0) for t, q in draws(q_deep, 2, rng, replace)]
        if len(top) > 1:
            nodes += [(t, q, 1) for t, q in draws(q_deep, 1, rng, replace)]
        return nodes

    return script


def tree_samples(tiny_pair, target, cfg: SamplingConfig, replace: bool):
    context = target.tokenize(PROMPT)
    with LlamaModel.load(tiny_pair.draft, n_ctx=256) as draft:
        q_root = sampling.distribution(draft.sync(context).copy(), cfg)
        q_deep = sampling.distribution(draft.sync([*context, int(q_root.ids[0])]).copy(), cfg)
    rng = np.random.default_rng(11)
    drafter = ScriptedDrafter(sampled_tree_script(q_root, q_deep, np.random.default_rng(5), replace))
    target.reset()
    target.sync(context[:-1])
    outputs, kinds = [], Counter()
    drawn = DrawnFrom(target, context)
    for _ in range(TREE_STEPS):
        step = drawn.step(lambda: speculative.speculative_step(target, drafter, context, FixedBudget(16), cfg, rng))
        outputs.append(step.tokens)
        first = step.path[0] if step.path else None
        kinds["first child"] += first == 0
        kinds["later child"] += first is not None and first > 0
        kinds["all rejected"] += first is None
    return outputs, kinds, drawn


def check_tree(tiny_pair, target, cfg, replace=False) -> tuple[float, float, Counter]:
    outputs, kinds, drawn = tree_samples(tiny_pair, target, cfg, replace)
    first = [out[0] for out in outputs]
    p_first = chi_square_pvalue(first, drawn.expected(tiny_pair, cfg))
    mode = Counter(first).most_common(1)[0][0]
    second = [out[1] for out in outputs if out[0] == mode and len(out) > 1]
    p_second = chi_square_pvalue(second, drawn.expected(tiny_pair, cfg, (mode,)))
    return p_first, p_second, kinds


@pytest.mark.parametrize(("cfg", "replace"), [(PURE, False), (PROCESSED, False), (PURE, True)],
                         ids=["T1-pure", "T0.8-topk-topp-minp", "T1-iid-children"])
def test_the_tree_rule_reproduces_the_target_distribution(tiny_pair, target, cfg, replace):
    """Children drawn without replacement (what drafters do) or i.i.d. (SpecInfer's original)."""
    p_first, p_second, kinds = check_tree(tiny_pair, target, cfg, replace)
    for kind in ("first child", "later child", "all rejected"):  # every branch of the rule ran
        assert kinds[kind] > TREE_STEPS * 0.05, kinds
    assert p_first > 0.001, f"first token does not follow the target's distribution (p={p_first:.2g})"
    assert p_second > 0.001, f"second token does not follow the target's distribution (p={p_second:.2g})"


def test_the_same_check_catches_judging_every_sibling_against_the_original_p(tiny_pair, target, monkeypatch):
    """Plain per-branch acceptance: no residual after a rejected sibling (so the next one, and
    the final draw, face the target's p as if nothing had been tried)."""

    class NoResidual:
        def __getattr__(self, name):
            return getattr(sampling, name)

        @staticmethod
        def residual(p, q):
            return p

    monkeypatch.setattr(tree, "sampling", NoResidual())
    p_first, _, kinds = check_tree(tiny_pair, target, PURE)
    assert kinds["later child"] > TREE_STEPS * 0.05
    assert p_first < 1e-6, "judging each sibling against p over-weights the drafter's tokens and must be caught"
