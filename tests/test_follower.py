"""TargetFollower: the queue every head drafter keeps of what the real tiny target decoded.

The MTP, EAGLE-3 and DFlash tests prove the drafters exact; this pins the shared bookkeeping
they stand on, against a real target's decodes: a rollback drops what was queued past it, the
head takes what it reads, a catch-up beyond the kept rows is counted, and a draft stops at K,
at an end token, or where the lookup takes over.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import tiny_gguf

from spectui.engine.drafters.follower import TargetFollower
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Feedback, Proposal


class QueuesTokens(TargetFollower[int]):
    """The smallest follower: queues each decoded token, as the MTP and EAGLE-3 drafters do."""

    def __init__(self, target: LlamaModel) -> None:
        self.follow(target)

    def _on_target_decode(self, start: int, tokens: Sequence[int]) -> None:
        self.drop_queued_from(start)
        self.queue.extend((start + i, int(t)) for i, t in enumerate(tokens))


class HandsOverAfter:
    """A budget whose lookup takes over once the draft holds `after` tokens."""

    def __init__(self, after: int) -> None:
        self.after = after

    def hands_over(self, context: Sequence[int], drafted: Sequence[int]) -> bool:
        return len(drafted) >= self.after


@pytest.fixture
def target(tiny_pair: tiny_gguf.TinyPair):
    model = LlamaModel.load(tiny_pair.target, n_ctx=128, n_threads=1)
    yield model
    model.close()


def test_the_queue_follows_decodes_and_rollbacks_and_the_head_takes_what_it_reads(target) -> None:
    follower = QueuesTokens(target)
    prompt = target.tokenize("Once upon a time")
    target.sync(prompt)
    assert follower.queue == list(enumerate(prompt))
    target.truncate(2)
    target.extend([5, 6, 7])  # a verify pass from position 2: what was queued there is gone
    assert follower.queue == [(0, prompt[0]), (1, prompt[1]), (2, 5), (3, 6), (4, 7)]
    assert follower.take_queued(3) == [(0, prompt[0]), (1, prompt[1]), (2, 5)]
    assert follower.queue == [(3, 6), (4, 7)]
    assert follower.catch_up(5) == 2  # nothing was kept by a verify yet: both are a catch-up
    follower.feedback(Feedback(context=[], proposal=Proposal(), accepted=0, emitted=[7], verify_rows=1))
    assert follower.catch_up(5) == 1  # the last verify kept one row: one more is a catch-up
    follower.unfollow()
    target.extend([8])
    assert follower.queue == [(3, 6), (4, 7)]  # unhooked: the target's decodes no longer arrive


def test_a_draft_ends_at_k_at_an_end_token_or_where_the_lookup_takes_over(target) -> None:
    follower = QueuesTokens(target)
    plain = next(t for t in range(10, 200) if not target.is_eog(t))
    eog = next(t for t in range(target.n_vocab) if target.is_eog(t))
    far = HandsOverAfter(99)

    def after(tokens: list[int], k: int, budget) -> bool:
        proposal = Proposal()
        for token in tokens:
            proposal.add(token, None, 1.0)
        return follower.draft_ends(proposal, k, budget, [1, 2, 3])

    assert not after([plain], 3, far)
    assert after([plain, plain, plain], 3, far)
    assert after([plain, eog], 3, far)
    assert after([plain, plain], 5, HandsOverAfter(2))
    follower.unfollow()
