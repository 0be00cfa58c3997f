"""What the drafters that read the target's own decodes share (MTP heads, EAGLE-3, DFlash).

Each follows the target through a `LlamaModel` decode listener: what the target decoded is
queued by position until the head reads it (before the next draft, or at once when the queue
grows long); a target decode from position p drops what was queued from p on (the rollback of
a verify, or a hybrid target's rewind). A draft stops at K, at an end-of-generation token, or
where the lookup ahead takes over. The rows kept by the last verify are counted, so a longer
catch-up (cycles spent with another drafter) is reported as such (`Proposal.caught_up`).

The subclass provides `_on_target_decode(start, tokens)`, which receives the target's decodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Budget, Feedback, Proposal

Item = TypeVar("Item")
"""What is queued with each position: a token (MTP, EAGLE-3) or a row of features (DFlash)."""


class TargetFollower(Generic[Item]):
    """A queue of the target's decoded positions that the head has not read yet."""

    target: LlamaModel

    def follow(self, target: LlamaModel) -> None:
        self.target = target
        self.queue: list[tuple[int, Item]] = []
        """(position, item) the target decoded and the head has not read yet, in order."""
        self.head_passes = 0
        """Head passes so far (tests and benchmarks)."""
        self._kept_rows = 0
        target.decode_listeners.append(self._on_target_decode)

    def _on_target_decode(self, start: int, tokens: Sequence[int]) -> None:
        raise NotImplementedError

    def drop_queued_from(self, start: int) -> None:
        """The target decodes from `start` again: what was queued there is gone."""
        self.queue = [entry for entry in self.queue if entry[0] < start]

    def take_queued(self, upto: int) -> list[tuple[int, Item]]:
        """The queued positions before `upto`, removed from the queue (the head reads them now)."""
        ready = [entry for entry in self.queue if entry[0] < upto]
        self.queue = [entry for entry in self.queue if entry[0] >= upto]
        return ready

    def catch_up(self, n: int) -> int:
        """How many of the positions queued before `n` go beyond the rows the last verify kept."""
        return max(0, sum(1 for entry in self.queue if entry[0] < n) - self._kept_rows)

    def draft_ends(self, proposal: Proposal, k: int, budget: Budget, context: Sequence[int]) -> bool:
        """After a token was added: K reached, an end-of-generation token, or the lookup ahead
        takes it from here next cycle, for free."""
        return (len(proposal.tokens) >= k or self.target.is_eog(proposal.tokens[-1])
                or budget.hands_over(context, proposal.tokens))

    def feedback(self, result: Feedback) -> None:
        """The kept rows arrive through the decode listener; remember how many."""
        self._kept_rows = result.accepted + 1

    def unfollow(self) -> None:
        if self._on_target_decode in self.target.decode_listeners:
            self.target.decode_listeners.remove(self._on_target_decode)
