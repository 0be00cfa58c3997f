"""On K = auto's probe the draft reads at most CATCH_UP_WINDOW tokens it missed (drafters/model.py).

A draft held at K = 0 for a while used to read the whole hold before its probe, a cost that grew
with the hold; now it reads the last CATCH_UP_WINDOW tokens as a sequence of its own and drafts
from there. On the real tiny pair: what it reads, where its sequence starts, that a new
conversation starts again from its first token, and that the reply stays the target's own greedy
reply with the window in play (the target verifies every proposal)."""

from __future__ import annotations

import numpy as np

from spectui.engine.drafters.model import CATCH_UP_WINDOW, DraftModelDrafter
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.generator import load_generator
from spectui.engine.step import speculative
from spectui.engine.step.drafter import FixedBudget
from spectui.engine.step.sampling import greedy

GREEDY = SamplingConfig(temperature=0.0)


class Probe(FixedBudget):
    """K = auto's probe of a held draft, as the draft sees it."""

    def probing(self, source: str) -> bool:
        return True


def target_greedy(gen, prompt: list[int], n: int) -> list[int]:
    gen.target.reset()
    logits = gen.target.sync(prompt)
    out: list[int] = []
    for _ in range(n):
        out.append(greedy(logits))
        logits = gen.target.extend([out[-1]])[0]
    return out


def test_a_draft_that_is_not_probed_reads_all_it_missed(tiny_pair):
    """Behind a lookup's run, or after K = 0 set by hand, a draft that pays keeps its context."""
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512)
    try:
        drafter = gen.drafter("model")
        prompt = gen.target.tokenize("in the")
        context = [*prompt, *target_greedy(gen, prompt, 2 * CATCH_UP_WINDOW)]
        drafter.reset()
        drafter.prefill(prompt)
        gen.target.sync(context[:-1])
        step = speculative.speculative_step(gen.target, drafter, context, FixedBudget(3), GREEDY,
                                            np.random.default_rng(0))
        assert step.proposal.caught_up == len(context) - len(prompt)  # all it missed since the prompt
        assert isinstance(drafter, DraftModelDrafter) and drafter.offset == 0
    finally:
        gen.close()


def test_a_draft_far_behind_reads_only_the_window_and_the_reply_is_unchanged(tiny_pair):
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512)
    try:
        drafter = gen.drafter("model")
        assert isinstance(drafter, DraftModelDrafter)
        prompt = gen.target.tokenize("in the")
        expected = target_greedy(gen, prompt, 2 * CATCH_UP_WINDOW + 40)
        gen.target.reset()
        drafter.reset()
        gen.target.sync(prompt)
        drafter.prefill(prompt)
        rng = np.random.default_rng(0)
        # The target decodes alone (K = 0, as a hold does) for more than a window ...
        context = [*prompt, *expected[:2 * CATCH_UP_WINDOW]]
        gen.target.sync(context[:-1])
        # ... then K = auto probes the draft: it reads the window, not all it missed.
        step = speculative.speculative_step(gen.target, drafter, context, Probe(3), GREEDY, rng)
        assert step.proposal.caught_up == CATCH_UP_WINDOW
        assert drafter.offset == len(context) - CATCH_UP_WINDOW
        assert drafter.model.cached[:CATCH_UP_WINDOW] == context[-CATCH_UP_WINDOW:]
        produced = list(step.tokens)
        context += step.tokens
        while len(produced) < 40:  # from the window on it keeps up as usual, greedy as the target
            step = speculative.speculative_step(gen.target, drafter, context, FixedBudget(3), GREEDY, rng)
            assert step.proposal.caught_up <= 2
            produced += step.tokens
            context += step.tokens
        assert produced[:40] == expected[2 * CATCH_UP_WINDOW:2 * CATCH_UP_WINDOW + 40]
        # A prompt that continues the window keeps it; another conversation starts from its start.
        drafter.prefill(context)
        assert drafter.offset > 0
        drafter.prefill(gen.target.tokenize("once upon"))
        assert drafter.offset == 0 and drafter.model.cached == gen.target.tokenize("once upon")
    finally:
        gen.close()
