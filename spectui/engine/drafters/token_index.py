"""Where did these tokens occur before? An incremental n-gram position index over a token store.

The draftless drafters (prompt lookup, suffix decoding) all ask the same question: at which earlier
positions was the context's last `h` tokens seen, and what followed? `TokenIndex` answers it for a
few fixed key lengths `h` with hash chains, the structure llama.cpp's `common_ngram_map` uses
(`common/ngram-map.cpp`, `key_map`: hash of an n-gram -> its last index), extended with a `prev`
link per position so that every occurrence can be walked, most recent first:

    position p          the index of a token that *follows* a key: key_h(p) = tokens[p-h:p]
    heads_h[bucket]     the last position whose key hashes to that bucket (-1: none)
    prev_h[p]           the previous position in the same bucket (-1: none)

Chains hold bucket mates, so every candidate is checked against the key (hash collisions cost a
step, never a wrong answer). Memory is a few int32 per token and level, no Python object per
token. The chains are canonical for a given table size: appending tokens one by one, in batches,
truncating and re-appending, or building from scratch give identical arrays (`check()` says so).

Token ids are non-negative; `SENTINEL` (-1) separates stored sequences: it never equals a context
token, so no match crosses it, and as a continuation it means "the sequence ended here".
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

import numpy as np

SENTINEL = -1
MAX_KEY = 64
_MASK = (1 << 64) - 1
_PRIME = 0x100000001B3  # FNV-1a's 64-bit prime: any odd multiplier mixes
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: the top bits of hash * golden pick the bucket
_POW = [pow(_PRIME, i, 1 << 64) for i in range(MAX_KEY)]
_MIN_BITS = 10
_UNLINK_UP_TO = 256  # truncating more (and more than what is kept) rebuilds instead of unlinking
_VECTORISE_FROM = 64  # extending by fewer tokens appends them one by one (numpy's overhead)


def as_token_list(context: Sequence[int] | np.ndarray) -> list[int]:
    """The context as a list of Python ints (no copy when it already is a list)."""
    if isinstance(context, list):
        return context
    if isinstance(context, np.ndarray):
        tokens: list[int] = context.tolist()
        return tokens
    return [int(t) for t in context]


class TokenIndex:
    """A token store with hash-chained positions for each key length in `key_lengths`."""

    def __init__(self, key_lengths: Iterable[int], capacity: int = 0) -> None:
        """`capacity`: tokens the chain tables are sized for at once (they double past it)."""
        self.key_lengths: tuple[int, ...] = tuple(sorted(set(key_lengths)))
        if not self.key_lengths or self.key_lengths[0] < 1 or self.key_lengths[-1] > MAX_KEY:
            raise ValueError(f"key lengths must lie in 1..{MAX_KEY}, got {key_lengths!r}")
        self.tokens = array("i")
        self._bits = max(_MIN_BITS, (capacity - 1).bit_length())
        self._prev = [array("i") for _ in self.key_lengths]
        self._heads = [self._empty_table() for _ in self.key_lengths]

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        """Bytes held by the store and the chains (the arrays' buffers)."""
        arrays = [self.tokens, *self._prev, *self._heads]
        return sum(a.buffer_info()[1] * a.itemsize for a in arrays)

    # --- building ---------------------------------------------------------------------------

    def append(self, token: int) -> None:
        """Store one token and link the position it occupies into every level's chain."""
        tokens = self.tokens
        p = len(tokens)
        if p + 1 > (1 << self._bits):
            self.extend([token])
            return
        tokens.append(token)
        for level, bucket in enumerate(self._buckets_at(p)):
            heads = self._heads[level]
            if bucket < 0:
                self._prev[level].append(-1)
            else:
                self._prev[level].append(heads[bucket])
                heads[bucket] = p

    def extend(self, new_tokens: Sequence[int] | np.ndarray) -> None:
        """Store many tokens at once (vectorised: the way to load a prompt or a past chat)."""
        new = np.asarray(new_tokens, dtype=np.int32).ravel()
        if new.size == 0:
            return
        if new.size < _VECTORISE_FROM and len(self.tokens) + new.size <= (1 << self._bits):
            for token in new.tolist():
                self.append(token)
            return
        start = len(self.tokens)
        self.tokens.frombytes(new.tobytes())
        if len(self.tokens) > (1 << self._bits):
            self._bits = (len(self.tokens) - 1).bit_length()
            self._relink_all()
        else:
            self._link_range(start)

    def truncate(self, length: int) -> None:
        """Forget every token from `length` on (a rollback, or a context that changed there)."""
        length = max(0, length)
        end = len(self.tokens)
        if length >= end:
            return
        if end - length > max(_UNLINK_UP_TO, length):
            del self.tokens[length:]
            self._relink_all()
            return
        for p in range(end - 1, length - 1, -1):
            for level, bucket in enumerate(self._buckets_at(p)):
                if bucket >= 0:
                    self._heads[level][bucket] = self._prev[level][p]
        del self.tokens[length:]
        for prev in self._prev:
            del prev[length:]

    def replace(self, new_tokens: Sequence[int] | np.ndarray) -> None:
        """Hold exactly `new_tokens` (chains rebuilt in one vectorised pass)."""
        new = np.asarray(new_tokens, dtype=np.int32).ravel()
        del self.tokens[:]
        self.tokens.frombytes(new.tobytes())
        self._bits = max(self._bits, (len(self.tokens) - 1).bit_length())
        self._relink_all()

    # --- queries ----------------------------------------------------------------------------

    def occurrences(self, key: Sequence[int], limit: int, max_steps: int | None = None) -> list[int]:
        """Positions that follow an earlier occurrence of `key`, most recent first (at most `limit`).

        `len(key)` must be one of `key_lengths`. `max_steps` bounds the chain walk (hash collisions
        included); by default 4 x limit.
        """
        h = len(key)
        level = self.key_lengths.index(h)
        steps_left = 4 * limit if max_steps is None else max_steps
        wanted = array("i", key)
        tokens, prev = self.tokens, self._prev[level]
        p = self._heads[level][_bucket(_key_hash(key), self._bits)]
        found: list[int] = []
        while p >= 0 and steps_left > 0:
            if tokens[p - h:p] == wanted:
                found.append(p)
                if len(found) >= limit:
                    break
            p = prev[p]
            steps_left -= 1
        return found

    def match_lengths(self, positions: Sequence[int], tail: Sequence[int], max_length: int) -> list[int]:
        """For each position p: how many tokens before p agree with the end of `tail` (<= max_length)."""
        m = min(max_length, len(tail))
        if not positions or m <= 0:
            return [0] * len(positions)
        store = np.frombuffer(self.tokens, dtype=np.int32)
        wanted = np.asarray(tail[len(tail) - m:][::-1], dtype=np.int32)
        index = np.asarray(positions, dtype=np.int64)[:, None] - 1 - np.arange(m)
        equal = (store[np.maximum(index, 0)] == wanted) & (index >= 0)
        lengths = np.where(equal.all(axis=1), m, equal.argmin(axis=1))
        del store
        matched: list[int] = lengths.tolist()
        return matched

    def check(self) -> None:
        """Raise AssertionError unless the chains equal a from-scratch build (tests, debugging)."""
        fresh = TokenIndex(self.key_lengths)
        fresh._bits = self._bits
        fresh._heads = [fresh._empty_table() for _ in self.key_lengths]
        fresh.tokens.extend(self.tokens)
        fresh._relink_all()
        for level, h in enumerate(self.key_lengths):
            assert self._prev[level] == fresh._prev[level], f"prev chain differs at key length {h}"
            assert self._heads[level] == fresh._heads[level], f"chain heads differ at key length {h}"

    # --- internals --------------------------------------------------------------------------

    def _empty_table(self) -> array[int]:
        return array("i", [-1]) * (1 << self._bits)

    def _buckets_at(self, p: int) -> list[int]:
        """The bucket of key_h(p) for every level (-1 where p < h: no full key yet)."""
        tokens, buckets = self.tokens, []
        value, i = 0, 0
        for h in self.key_lengths:
            if p < h:
                buckets.append(-1)
                continue
            while i < h:
                value = (value + (tokens[p - 1 - i] + 1) * _POW[i]) & _MASK
                i += 1
            buckets.append(_bucket(value, self._bits))
        return buckets

    def _relink_all(self) -> None:
        self._heads = [self._empty_table() for _ in self.key_lengths]
        for prev in self._prev:
            del prev[:]
        self._link_range(0)

    def _link_range(self, start: int) -> None:
        """Link positions start..len-1 (whose tokens are stored) into the chains, vectorised."""
        end = len(self.tokens)
        origin = max(0, start - self.key_lengths[-1])  # the oldest token a new key reaches
        window = np.frombuffer(self.tokens, dtype=np.int32)[origin:]
        shifted = window.astype(np.uint64) + np.uint64(1)  # SENTINEL -> 0, as in _key_hash
        del window
        value = np.zeros(end - start, dtype=np.uint64)
        positions = np.arange(start, end, dtype=np.int64)
        i = 0
        for level, h in enumerate(self.key_lengths):
            while i < h:
                source = np.maximum(positions - 1 - i - origin, 0)
                value += shifted[source] * np.uint64(_POW[i])
                i += 1
            keyed = positions >= h
            buckets = _buckets_of(value[keyed], self._bits)
            prev = np.full(end - start, -1, dtype=np.int32)
            prev[keyed] = self._link(level, positions[keyed], buckets)
            self._prev[level].frombytes(prev.tobytes())

    def _link(self, level: int, positions: np.ndarray, buckets: np.ndarray) -> np.ndarray:
        """Chain ascending `positions` behind the current heads of their buckets; returns prev."""
        if positions.size == 0:
            return np.empty(0, dtype=np.int32)
        heads = np.frombuffer(self._heads[level], dtype=np.int32)
        order = np.argsort(buckets, kind="stable")
        sorted_buckets, sorted_positions = buckets[order], positions[order]
        first = np.ones(order.size, dtype=bool)
        first[1:] = sorted_buckets[1:] != sorted_buckets[:-1]
        prev_sorted = np.empty(order.size, dtype=np.int32)
        prev_sorted[1:] = sorted_positions[:-1]
        prev_sorted[first] = heads[sorted_buckets[first]]
        last = np.ones(order.size, dtype=bool)
        last[:-1] = first[1:]
        heads[sorted_buckets[last]] = sorted_positions[last]
        del heads
        prev = np.empty(order.size, dtype=np.int32)
        prev[order] = prev_sorted
        return prev


def _key_hash(key: Sequence[int]) -> int:
    """Polynomial hash of a key, last token weighted 1 (so nested keys share a running sum)."""
    value = 0
    for i, token in enumerate(reversed(key)):
        value = (value + (token + 1) * _POW[i]) & _MASK
    return value


def _bucket(value: int, bits: int) -> int:
    return ((value * _GOLDEN) & _MASK) >> (64 - bits)


def _buckets_of(values: np.ndarray, bits: int) -> np.ndarray:
    return ((values * np.uint64(_GOLDEN)) >> np.uint64(64 - bits)).astype(np.int64)


class ContextIndex(TokenIndex):
    """A `TokenIndex` that follows one growing context (prompt + reply so far).

    `sync(context)` keeps the longest common prefix and stores the rest, so a context that grew
    by a few tokens costs a few appends, and one that was rolled back, edited or replaced is
    truncated where it first differs. A plain list mirror makes the prefix check one C-level
    list comparison (about 8k pointer compares at 8k tokens, no conversion).
    """

    def __init__(self, key_lengths: Iterable[int], capacity: int = 16384) -> None:
        super().__init__(key_lengths, capacity)
        self.history: list[int] = []

    def sync(self, context: Sequence[int] | np.ndarray) -> list[int]:
        """Make the store equal `context`; returns the context as a list of ints."""
        tokens = as_token_list(context)
        if len(self.history) != len(self.tokens):  # appended to directly: refresh the mirror
            self.history = self.tokens.tolist()
        kept = common_prefix(self.history, tokens)
        if kept < len(self.history):
            self.truncate(kept)
        new = tokens[kept:]
        self.extend(new)
        self.history.extend(new)
        return tokens

    def truncate(self, length: int) -> None:
        super().truncate(length)
        del self.history[max(0, length):]

    def replace(self, new_tokens: Sequence[int] | np.ndarray) -> None:
        super().replace(new_tokens)
        self.history = self.tokens.tolist()


def common_prefix(stored: list[int], context: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(stored), len(context))
    if (stored if n == len(stored) else stored[:n]) == (context if n == len(context) else context[:n]):
        return n
    low, high = 0, n  # prefix of `low` agrees, of `high` does not
    while high - low > 1:
        mid = (low + high) // 2
        if stored[:mid] == context[:mid]:
            low = mid
        else:
            high = mid
    return low
