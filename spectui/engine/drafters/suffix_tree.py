"""Suffix decoding (Oliaro et al., 2024): propose what most often followed the context's suffix.

What vLLM runs as `method=suffix` (Snowflake's arctic-inference, `csrc/suffix_decoding/`) keeps
suffix trees whose node counts say how often each continuation followed: a local tree over this
conversation and a global one over past responses, each capped at depth 64. A draft matches the
longest suffix of the context, then follows the most frequent child while the estimated
probability (product of count ratios) stays >= `min_token_prob`, for at most
`max_spec_factor * match_length + max_spec_offset` tokens; the better-scored (sum of
probabilities) of the local and global drafts wins. Ours may go on past that, up to
`agreed_spec_factor * match_length + max_spec_offset`, while two or more occurrences agree on
each token (`SpecLimits.agreed_spec_factor`).

Here the same draft comes from a `TokenIndex` instead of a tree. A tree node for the string s
stands for the set of positions where s occurred; its count is the size of that set and its
children are the tokens found right after those positions. The index finds those positions at
query time (hash chains for the last 2 and 8 tokens, each candidate's match length measured back
to 64 tokens in one numpy pass) and counts their continuations then, instead of updating up to 64
node counts for every appended token. So appending is O(1), memory is a few int32 per token
(no Python object per node), and removing a sequence is a rebuild of the arrays. The price: a
very frequent short suffix is counted over its most recent `max_candidates` occurrences (a
recency window), not all of them.

Two details differ from the tree on purpose: the context's own position (the end of the local
store) is not counted as an occurrence (the tree counts it, so one earlier sighting scores 1/2
there), and a local occurrence that runs into the present continues into the draft itself, so a
loop the model is in (A B A B ...) is proposed for the full length.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from spectui.engine.drafters.token_index import SENTINEL, ContextIndex, TokenIndex, as_token_list

MAX_DEPTH = 64
KEY_LENGTHS = (2, 8)
MAX_CANDIDATES = 64
_LENGTHS_TRIED = 3  # distinct match lengths evaluated per key length (longest first)


@dataclass
class SuffixDraft:
    """A proposed continuation and how sure the counts are of it."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    """probs[i]: estimated probability that tokens[0..i] are all right (product of count ratios)."""
    score: float = 0.0
    """sum(probs): the expected number of accepted tokens if the counts were calibrated."""
    match_length: int = 0
    """How many context tokens the match covered."""
    source: str = ""
    """"local" (this conversation), "history" (past chats) or "" (no draft)."""


@dataclass(frozen=True)
class SpecLimits:
    """How long and how unsure a draft may get."""

    max_tokens: int
    """At most this many tokens (the K of the cycle)."""
    max_spec_factor: float = 1.0
    """At most max_spec_factor x match length + max_spec_offset tokens."""
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1
    """Stop before a token whose cumulative probability estimate would fall below this."""
    max_depth: int = MAX_DEPTH
    """The longest context suffix matched (the tree depth of arctic-inference)."""
    max_candidates: int = MAX_CANDIDATES
    """Occurrences of a key looked at, most recent first (the recency window of the counts)."""
    agreed_spec_factor: float = 0.0
    """Past max_spec_factor x match length, a draft goes on up to agreed_spec_factor x match
    length + max_spec_offset tokens while at least two occurrences agree on each token (0: no
    further). A line repeated with one word changed matches only a few tokens after that word,
    but every earlier line agrees on the rest of it; one earlier sighting of a short match says
    much less."""

    def cap(self, match_length: int) -> int:
        """The longest draft a match of this length may propose (agreed on or not)."""
        return self._cap(match_length, max(self.max_spec_factor, self.agreed_spec_factor))

    def solo_cap(self, match_length: int) -> int:
        """The longest draft a match of this length may propose on one occurrence's say."""
        return self._cap(match_length, self.max_spec_factor)

    def _cap(self, match_length: int, factor: float) -> int:
        by_match = int(match_length * factor + self.max_spec_offset + 1e-6)
        return max(0, min(self.max_tokens, by_match))


def speculate_in(index: TokenIndex, context: Sequence[int], limits: SpecLimits,
                 open_end: bool = False) -> SuffixDraft:
    """The best-scored draft that `index` supports for the end of `context`.

    Longer key lengths are searched first; a shorter one only when it could still beat the best
    draft found (a match of length m proposes at most `limits.cap(m)` tokens, each prob <= 1).
    `open_end`: the index stores `context` itself, so an occurrence may run into the draft.
    """
    best = SuffixDraft()
    if not len(index):
        return best  # nothing stored (no past chats): every cycle asks, so say it at once
    tail = as_token_list(context)[-limits.max_depth:]
    upper = limits.max_depth  # the longest match the current key length may claim
    for h in reversed(index.key_lengths):
        if h <= min(upper, len(tail)) and best.score < limits.cap(upper):
            found = index.occurrences(tail[-h:], limit=limits.max_candidates)
            if found:
                lengths = [min(n, upper) for n in index.match_lengths(found, tail, upper)]
                best = _best_over_lengths(index, found, lengths, best, limits, open_end)
        upper = min(upper, h - 1)
    return best


def _best_over_lengths(index: TokenIndex, found: list[int], lengths: list[int], best: SuffixDraft,
                       limits: SpecLimits, open_end: bool) -> SuffixDraft:
    """Try the distinct match lengths, longest first; the set for m is every occurrence >= m."""
    for m in itertools.islice(sorted(set(lengths), reverse=True), _LENGTHS_TRIED):
        cap = limits.cap(m)
        if cap <= best.score:
            break  # shorter matches propose fewer tokens: none can score higher
        occurrences = [p for p, n in zip(found, lengths, strict=True) if n >= m]
        draft = follow_counts(index.tokens, occurrences, cap, limits.min_token_prob, open_end,
                              limits.solo_cap(m))
        if draft.score > best.score:
            draft.match_length = m
            best = draft
    return best


def follow_counts(store: Sequence[int], positions: list[int], cap: int, min_token_prob: float,
                  open_end: bool, solo_cap: int) -> SuffixDraft:
    """Walk the most frequent continuation of `positions` (most recent first breaks ties): up to
    `solo_cap` tokens, and on to `cap` while two or more occurrences agree on each token."""
    draft = SuffixDraft()
    tokens, probs = draft.tokens, draft.probs
    end = len(store)
    prob = 1.0
    solo = min(solo_cap, cap)
    while len(tokens) < cap and positions:
        if len(positions) == 1:  # a single occurrence: copy what followed it
            p = positions[0]
            while len(tokens) < solo and (p < end or open_end):
                token = store[p] if p < end else tokens[p - end]
                if token == SENTINEL:
                    break
                tokens.append(token)
                probs.append(prob)
                p += 1
            break
        nexts = [store[p] if p < end else tokens[p - end] for p in positions]
        counts = Counter(t for t in nexts if t != SENTINEL)
        if not counts:
            break
        token, count = max(counts.items(), key=lambda item: item[1])
        if prob * count / len(positions) < min_token_prob or (len(tokens) >= solo and count < 2):
            break
        prob = prob * count / len(positions)
        tokens.append(token)
        probs.append(prob)
        positions = [p + 1 for p, t in zip(positions, nexts, strict=True) if t == token]
        if not open_end:
            positions = [p for p in positions if p < end]
    draft.score = sum(probs)
    return draft


class SuffixIndex:
    """Past sequences (chats, replies) in one `TokenIndex`, oldest evicted first over a budget.

    Sequences are stored back to back, each closed by SENTINEL. Adding one that does not fit
    evicts the oldest until the live tokens fit in `budget_tokens` less a 10 % slack (so the
    next few additions do not rebuild again), then rebuilds the arrays from what is left.
    Re-adding a key replaces its sequence (a chat that grew since it was last added): a
    truncation when it is the newest one, else a rebuild.
    """

    def __init__(self, budget_tokens: int = 200_000, key_lengths: Sequence[int] = KEY_LENGTHS) -> None:
        if budget_tokens < 2:
            raise ValueError(f"the history budget must be at least 2 tokens, got {budget_tokens}")
        self.budget_tokens = budget_tokens
        self.index = TokenIndex(key_lengths)
        self._spans: dict[Hashable, tuple[int, int]] = {}  # key -> (start, length), oldest first
        self._anonymous = itertools.count()

    def __len__(self) -> int:
        """Tokens stored, separators included (never above budget_tokens)."""
        return len(self.index)

    @property
    def sequences(self) -> int:
        return len(self._spans)

    @property
    def nbytes(self) -> int:
        return self.index.nbytes

    def add(self, tokens: Sequence[int] | np.ndarray, key: Hashable | None = None,
            replace_prefixes: bool = False) -> None:
        """Store one whole sequence; `key` (e.g. a chat id) replaces an earlier one with that key,
        and `replace_prefixes` also every stored sequence that `tokens` begins with (a chat that
        grew since it was added under another key)."""
        new = np.asarray(tokens, dtype=np.int32).ravel()[-(self.budget_tokens - 1):]
        if new.size == 0:
            return
        if key is None:
            key = ("anonymous", next(self._anonymous))
        stale = {key} & self._spans.keys()
        if replace_prefixes:
            stale |= set(self.prefix_keys(new))
        must_rebuild = False
        for start, length in sorted((self._spans.pop(k) for k in stale), reverse=True):
            if start + length + 1 == len(self.index):
                self.index.truncate(start)  # the newest sequence grew (a chat re-added): cheap
            else:
                must_rebuild = True
        if len(self.index) + new.size + 1 > self.budget_tokens:
            target = int(self.budget_tokens * 0.9) - new.size - 1
            while self._spans and self._live_tokens() > target:
                del self._spans[next(iter(self._spans))]
            must_rebuild = True
        if must_rebuild:
            self._rebuild()
        self._spans[key] = (len(self.index), new.size)
        self.index.extend(np.append(new, np.int32(SENTINEL)))

    def prefix_keys(self, tokens: Sequence[int] | np.ndarray) -> list[Hashable]:
        """Keys of the stored sequences that `tokens` begins with (one slice comparison each)."""
        new = np.asarray(tokens, dtype=np.int32).ravel()
        store = np.frombuffer(self.index.tokens, dtype=np.int32)
        found = [key for key, (start, length) in self._spans.items()
                 if length <= new.size and np.array_equal(store[start:start + length], new[:length])]
        del store  # release the buffer export before the array grows
        return found

    def speculate(self, context: Sequence[int], max_tokens: int, max_spec_factor: float = 1.0,
                  max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                  agreed_spec_factor: float = 0.0) -> SuffixDraft:
        """The best draft the stored sequences support for the end of `context`."""
        limits = SpecLimits(max_tokens, max_spec_factor, max_spec_offset, min_token_prob,
                            agreed_spec_factor=agreed_spec_factor)
        return speculate_in(self.index, context, limits)

    def _live_tokens(self) -> int:
        return sum(length + 1 for _, length in self._spans.values())

    def _rebuild(self) -> None:
        store = np.frombuffer(self.index.tokens, dtype=np.int32)
        pieces, spans, start = [], {}, 0
        for key, (old_start, length) in self._spans.items():
            pieces.append(store[old_start:old_start + length + 1])
            spans[key] = (start, length)
            start += length + 1
        kept = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)
        del store, pieces
        self._spans = spans
        self.index.replace(kept)


@dataclass
class SuffixStats:
    """What the suffix drafter proposed and what the target kept, per source."""

    proposals: dict[str, int] = field(default_factory=lambda: {"local": 0, "history": 0})
    proposed: dict[str, int] = field(default_factory=lambda: {"local": 0, "history": 0})
    accepted: dict[str, int] = field(default_factory=lambda: {"local": 0, "history": 0})
    expected: float = 0.0
    """Sum of the scores of the drafts that were observed (what the counts promised)."""

    @property
    def calibration(self) -> float:
        """Accepted tokens per promised token (1.0 until something was observed)."""
        return sum(self.accepted.values()) / self.expected if self.expected > 0 else 1.0


class SuffixCache:
    """The suffix drafter's state: this conversation (local) and the user's past chats (history).

    Call `propose(context, k)` once per cycle with the full token history, `observe(accepted)`
    after verification, and `add_history(tokens, key)` for past chats (at start, oldest first)
    and for a finished conversation. The local index follows `context` as it grows, shrinks or
    changes (a common-prefix check per call); the history index is bounded by its token budget.
    A lock lets the UI thread add history while the generation thread proposes.
    """

    def __init__(self, *, max_depth: int = MAX_DEPTH, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                 agreed_spec_factor: float = 0.0,
                 history_budget_tokens: int = 200_000, key_lengths: Sequence[int] = KEY_LENGTHS,
                 max_candidates: int = MAX_CANDIDATES) -> None:
        if not 0.0 <= min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must lie in [0, 1], got {min_token_prob}")
        if not 1 <= max_depth <= 64 or max(key_lengths) > max_depth:
            raise ValueError(f"max_depth must lie in 1..64 and cover the key lengths, got {max_depth}")
        self.limits = SpecLimits(0, max_spec_factor, max_spec_offset, min_token_prob, max_depth,
                                 max_candidates, agreed_spec_factor)
        self._limits_by_k: dict[int, SpecLimits] = {}
        """`limits` with each max_tokens asked for (`draft`); `limits` never changes."""
        self.local = ContextIndex(key_lengths)
        self.history = SuffixIndex(history_budget_tokens, key_lengths)
        self.stats = SuffixStats()
        self._last: SuffixDraft | None = None
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes held by both indexes' arrays (plus ~8 bytes/token for the local list mirror)."""
        return self.local.nbytes + self.history.nbytes + 8 * len(self.local.history)

    def add_history(self, tokens: Sequence[int] | np.ndarray, key: Hashable | None = None,
                    replace_prefixes: bool = False) -> None:
        """Remember a past chat (or reply); the same `key` again replaces it (and, with
        `replace_prefixes`, so does any stored chat that `tokens` begins with)."""
        with self._lock:
            self.history.add(tokens, key, replace_prefixes)

    def prefill(self, context: Sequence[int] | np.ndarray) -> None:
        """Read a new prompt into the local index now (the first propose then only matches)."""
        with self._lock:
            self.local.sync(context)

    def speculate(self, context: Sequence[int] | np.ndarray, max_tokens: int,
                  max_spec_factor: float = 1.0, max_spec_offset: float = 0.0,
                  min_token_prob: float = 0.1) -> SuffixDraft:
        """The better-scored of the local and the history draft under these limits (the local one
        on a tie); the cache's own depth and recency window."""
        return self._speculate(context, replace(self.limits, max_tokens=max_tokens, max_spec_factor=max_spec_factor,
                                                max_spec_offset=max_spec_offset, min_token_prob=min_token_prob,
                                                agreed_spec_factor=0.0))

    def _speculate(self, context: Sequence[int] | np.ndarray, limits: SpecLimits) -> SuffixDraft:
        with self._lock:
            tokens = self.local.sync(context)
            local = speculate_in(self.local, tokens, limits, open_end=True)
            past = speculate_in(self.history.index, tokens, limits)
        local.source = "local" if local.tokens else ""
        past.source = "history" if past.tokens else ""
        return local if local.score >= past.score else past

    def propose(self, context: Sequence[int] | np.ndarray, k: int) -> tuple[list[int], list[float]]:
        """Up to `k` tokens to follow `context`, each with its cumulative probability estimate."""
        draft = self.draft(context, k)
        self.offer(draft)
        return draft.tokens, draft.probs

    def draft(self, context: Sequence[int] | np.ndarray, k: int) -> SuffixDraft:
        """The draft `propose` would make, with its evidence; `observe` judges it only once it is
        `offer`ed (a drafter may shorten it or decide not to propose it)."""
        if k <= 0:
            return SuffixDraft()
        limits = self._limits_by_k.get(k)
        if limits is None:  # one per K asked: a dataclass `replace` every cycle was a tenth of the lookup
            limits = self._limits_by_k[k] = replace(self.limits, max_tokens=k)
        return self._speculate(context, limits)

    def offer(self, draft: SuffixDraft | None) -> None:
        """`draft` (or nothing) is what was proposed: the next `observe` judges it."""
        self._last = draft if draft is not None and draft.tokens else None

    def observe(self, accepted: int) -> None:
        """The target kept the first `accepted` tokens of the last proposal."""
        draft, self._last = self._last, None
        if draft is None:
            return
        self.stats.proposals[draft.source] += 1
        self.stats.proposed[draft.source] += len(draft.tokens)
        self.stats.accepted[draft.source] += max(0, min(accepted, len(draft.tokens)))
        self.stats.expected += draft.score

    def reset(self) -> None:
        """Forget the conversation (the history stays)."""
        with self._lock:
            self.local.replace([])
            self._last = None
