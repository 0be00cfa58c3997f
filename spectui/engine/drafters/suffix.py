"""Suffix decoding (`--drafter suffix`): the likeliest continuation from this chat and past chats.

SuffixDecoding (Oliaro et al., 2024; vLLM's `suffix` method) keeps suffix structures over the
conversation (`local`) and over earlier ones (`history`), matches the longest suffix of the
context, and follows the most frequent continuation while its estimated probability holds
(`SuffixCache`, `suffix_tree.py`). It needs no draft model and no forward pass (`work = 0`).

What it learns from:
* this conversation: the prompt and the reply so far, updated every cycle;
* the user's past chats, handed over at load (`BuildContext.history`: the chat app reads its
  store through `spectui.session.history`), oldest first, newest kept when over the budget;
* conversations of this session: when a reply starts on a prompt that does not continue the
  conversation held (another chat was opened), the one held goes into the history.
A conversation is keyed by its opening (`OPENING_TOKENS`), and a conversation that begins with
one already stored replaces it, so the same chat added again, grown, is not counted twice.

Memory, bounded: the history keeps at most `HISTORY_BUDGET_TOKENS` tokens (oldest chats evicted
first) at about 24.5 bytes per token, 4.9 MB at the default 200k; the conversation costs about
21.7 bytes per token plus 128 KB of chain heads (measured by `scripts/bench_suffix.py`).

Proposals are point masses (q = None), exact at any temperature; their length and whether to
propose at all follow `lookup_gate` (count ratios calibrated per match length and source).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from spectui.engine.drafters.kinds import KINDS
from spectui.engine.drafters.lookup_base import Candidate, LookupDrafter
from spectui.engine.drafters.lookup_gate import MIN_TOKEN_PROB
from spectui.engine.drafters.spec import BuildContext, DrafterSpec
from spectui.engine.drafters.suffix_tree import SuffixCache, SuffixDraft
from spectui.engine.drafters.token_index import as_token_list, common_prefix
from spectui.engine.step.drafter import Feedback

SOURCE = "suffix"
KIND = KINDS[SOURCE]
HISTORY_BUDGET_TOKENS = 200_000
"""Tokens of past chats kept (about 4.9 MB)."""
OPENING_TOKENS = 256
"""A conversation's key: its first this many tokens (the system prompt, the first turns)."""
RETIRE_BELOW = 0.5
"""A new prompt that shares less than this fraction of the conversation held starts another one."""
MAX_BUCKET = 6
"""Match lengths are calibrated in powers of two: 1, 2-3, 4-7, 8-15, 16-31, 32+."""
MAX_SPEC_FACTOR = 2.0
"""A match of m tokens proposes at most 2m on one earlier occurrence's say (vLLM's default is m):
our gate calibrates each match length's later tokens on what the target accepted
(`lookup_gate.Calibration`) and trims the proposal where they fall off."""
AGREED_SPEC_FACTOR = 8.0
"""...and up to 8m while two or more earlier occurrences agree on each token. On the demo pair a
line repeated with the day changed ("Wednesday: 100m, 100m, 100m, 100m\nWeek ") matches only
": 1" (3 tokens) after the new word, and every earlier line agrees on the other 24: at m the rest
took three lookup cycles (3, 7, then 15 tokens), at 2m two (6, then 17), now one (with
`limits.MAX_LOOKUP_DRAFT` above 16). A flat 8m proposed long runs after short matches seen once
in prose, and `suffix` alone on the story prompts fell from 1.21x to 1.08x over off; agreement
keeps that at 2m (docs/BENCHMARKS.md, issue #13)."""


class SuffixDrafter(LookupDrafter):
    """Proposes the most frequent continuation of the context's longest matching suffix."""

    source = SOURCE
    max_k = KIND.max_k

    def __init__(self, cache: SuffixCache | None = None, *, gated: bool = True,
                 min_token_prob: float = MIN_TOKEN_PROB) -> None:
        super().__init__(gated=gated, min_token_prob=min_token_prob)
        self.cache = cache or SuffixCache(history_budget_tokens=HISTORY_BUDGET_TOKENS,
                                          max_spec_factor=MAX_SPEC_FACTOR,
                                          agreed_spec_factor=AGREED_SPEC_FACTOR)
        self._draft = SuffixDraft()

    @property
    def label(self) -> str:  # type: ignore[override]
        chats = self.cache.history.sequences
        return f"{KIND.label} ({chats} past chat{'s' if chats != 1 else ''})"

    def learn(self, conversations: Iterable[Sequence[int]]) -> None:
        """Add past conversations (oldest first) to the history."""
        for tokens in conversations:
            tokens = as_token_list(tokens)
            if tokens:
                self.cache.add_history(tokens, key=opening_key(tokens), replace_prefixes=True)

    def prefill(self, context: Sequence[int]) -> None:
        super().prefill(context)
        held = self.cache.local.history
        tokens = as_token_list(context)
        if held and common_prefix(held, tokens) < RETIRE_BELOW * len(held):
            self.learn([list(held)])  # another chat was opened: keep this one as history
        self.cache.prefill(tokens)

    def find(self, context: list[int], k: int) -> Candidate | None:
        """The cache's best draft (local or history); its evidence is the count ratios, calibrated
        per match length and per source."""
        self.cache.offer(None)
        draft = self.cache.draft(context, k)
        self._draft = draft
        if not draft.tokens:
            return None
        return Candidate(draft.tokens, draft.probs, (draft.source, min(draft.match_length.bit_length(), MAX_BUCKET)))

    def offered(self, candidate: Candidate, n: int) -> None:
        draft = self._draft
        if n > 0:
            self.cache.offer(SuffixDraft(draft.tokens[:n], draft.probs[:n], sum(draft.probs[:n]),
                                         draft.match_length, draft.source))

    def feedback(self, result: Feedback) -> None:
        """Count what was kept per source (local / history) in the cache's stats."""
        self.cache.observe(result.accepted)

    def reset(self) -> None:
        """Forget the conversation (not added to the history: a benchmark resets between runs of
        the same prompt, which must not learn from each other)."""
        super().reset()
        self.cache.reset()


def opening_key(tokens: Sequence[int]) -> Hashable:
    """The key a conversation is stored under in the history: its opening tokens."""
    return ("opening", hash(tuple(tokens[:OPENING_TOKENS])))


def build(spec: DrafterSpec, ctx: BuildContext) -> SuffixDrafter:
    """A suffix drafter that has read the user's past chats, if the caller supplied them."""
    drafter = SuffixDrafter()
    if ctx.history is not None:
        drafter.learn(ctx.history(ctx.target))
    return drafter
