"""Prompt lookup: find the context's last n tokens earlier in the context, propose what followed.

The draftless drafter vLLM calls `ngram` (`prompt_lookup_min/max`: the longest n-gram in
[min, max] that occurs earlier, `vllm/v1/spec_decode/ngram_proposer.py`) and llama.cpp calls
`ngram-simple` (one n, the most recent earlier match: `common_ngram_simple_draft` in
`common/ngram-map.cpp`). Here: n from `max_ngram` down to `min_ngram`, the most recent earlier
occurrence of the longest n-gram that has one, up to k tokens of what followed it. An occurrence
that runs into the present continues into the proposal itself (the context ends in a loop
"A B C A B": propose "C A B C ..." for the full k, where llama.cpp and vLLM stop at the end).

The index (`ContextIndex`, one hash chain per n) is updated as tokens are appended and truncated
where the context changed, so a call costs a prefix check plus a few appends and dictionary-free
chain lookups, at any context length.

Confidence: how often the earlier occurrences of the same n-gram were followed by the proposed
token (consistency), times how often a first token proposed from an n-gram of this length was
accepted so far (learned through `observe`, starting at 1/2); later tokens decay by the learned
rate at which an accepted token's successor was accepted too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spectui.engine.drafters.token_index import ContextIndex


@dataclass
class LookupMatch:
    """The continuation found for the context's end, and the evidence for it."""

    tokens: list[int]
    ngram: int
    """The length n of the matched n-gram."""
    position: int
    """Where the proposal was copied from: the context index right after the earlier n-gram."""
    occurrences: int
    """Earlier occurrences of the n-gram looked at (the most recent `max_occurrences`)."""
    agreeing: int
    """How many of them were followed by the same first token as the proposal."""
    probs: list[float]
    """probs[i]: estimated probability that tokens[0..i] are all accepted."""

    @property
    def consistency(self) -> float:
        return self.agreeing / self.occurrences

    @property
    def confidence(self) -> float:
        """Estimated probability that the first token is accepted."""
        return self.probs[0] if self.probs else 0.0

    @property
    def score(self) -> float:
        """Expected accepted tokens: sum(probs)."""
        return sum(self.probs)


class _Rate:
    """A success rate with a Beta prior (successes + a) / (trials + a + b)."""

    def __init__(self, prior_mean: float, prior_weight: float = 2.0) -> None:
        self.successes = prior_mean * prior_weight
        self.trials = prior_weight

    @property
    def value(self) -> float:
        return self.successes / self.trials

    def add(self, successes: int, trials: int) -> None:
        self.successes += successes
        self.trials += trials


class PromptLookup:
    """The n-gram drafter's state: an incremental index over the context, and learned rates."""

    def __init__(self, min_ngram: int = 2, max_ngram: int = 5, max_occurrences: int = 16) -> None:
        if not 1 <= min_ngram <= max_ngram <= 64:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram <= 64, got {min_ngram}..{max_ngram}")
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.max_occurrences = max(1, max_occurrences)
        self.index = ContextIndex(range(min_ngram, max_ngram + 1))
        self.first_accepted = {n: _Rate(0.5) for n in range(min_ngram, max_ngram + 1)}
        """Per n: how often the first proposed token was accepted."""
        self.next_accepted = _Rate(0.75)
        """How often a proposed token was accepted when the one before it was."""
        self._last: LookupMatch | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the index arrays plus the list mirror's pointers."""
        return self.index.nbytes + 8 * len(self.index.history)

    def prefill(self, context: Sequence[int] | np.ndarray) -> None:
        """Read a new prompt into the index now (the first propose then only looks up)."""
        self.index.sync(context)

    def lookup(self, context: Sequence[int] | np.ndarray, k: int) -> LookupMatch | None:
        """The continuation of the most recent earlier occurrence of the longest matching n-gram."""
        history = self.index.sync(context)
        if k <= 0:
            return None
        for n in range(min(self.max_ngram, len(history) - 1), self.min_ngram - 1, -1):
            found = self.index.occurrences(history[-n:], limit=self.max_occurrences)
            if found:
                return self._match(history, n, found, k)
        return None

    def propose(self, context: Sequence[int] | np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """Up to `k` tokens to follow `context`, each with its cumulative probability estimate."""
        match = self.lookup(context, k)
        self._last = match
        return (match.tokens, match.probs) if match else ([], [])

    def observe(self, accepted: int) -> None:
        """The target kept the first `accepted` tokens of the last proposal: update the rates."""
        match, self._last = self._last, None
        if match is None or not match.tokens:
            return
        proposed = len(match.tokens)
        accepted = max(0, min(accepted, proposed))
        self.first_accepted[match.ngram].add(1 if accepted else 0, 1)
        # token i >= 1 was tried when token i-1 was accepted; it succeeded when i < accepted
        self.next_accepted.add(max(accepted - 1, 0), min(accepted, proposed - 1))

    def reset(self) -> None:
        """Forget the context (the learned rates stay)."""
        self.index.replace([])
        self._last = None

    def _match(self, history: list[int], n: int, found: list[int], k: int) -> LookupMatch:
        position = found[0]
        tokens: list[int] = []
        end = len(history)
        for p in range(position, position + k):
            tokens.append(history[p] if p < end else tokens[p - end])
        agreeing = sum(1 for p in found if history[p] == tokens[0])
        first = self.first_accepted[n].value * agreeing / len(found)
        decay = self.next_accepted.value
        probs = [first * decay ** i for i in range(len(tokens))]
        return LookupMatch(tokens, n, position, len(found), agreeing, probs)
