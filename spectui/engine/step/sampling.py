"""From logits to a processed next-token distribution, and drawing from it.

Target and draft go through the *same* processing (logit bias, grammar, top-k, temperature,
top-p, min-p), so the speculative rule compares like with like: the output is distributed exactly
as the target's processed distribution. Distributions are sparse (`ids`, `probs`): top-k keeps
the work small even for a 262k-token vocabulary, and a grammar is asked only about the best
candidates, best first, until top-k of them are allowed (the same tokens as masking the whole
vocabulary first, at a fraction of the cost).
On a GPU a verify pass of a 7B model takes ~10-20 ms, and partitioning K+1 rows of a 248k
vocabulary took ~0.3 ms per row here, so without a grammar the top-k ids are found from the
row's column maxima first (`top_k_ids`); `reference_distribution` is the processing written plainly, and the
tests hold the two to the same distribution on random rows with ties; `scripts/bench_host.py`
measures both in one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spectui.engine.generation_config import SamplingConfig, TokenConstraint
from spectui.errors import SpectuiError

FIRST_ASKED = 64
"""Candidates a grammar is first asked about when sampling (x8 each time too few are allowed)."""


class NoTokenAllowed(SpectuiError):
    """The grammar (or a logit bias of -inf on every token) allows no next token."""


@dataclass(frozen=True)
class Dist:
    """A distribution over the few token ids it names; every other id has probability 0."""

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def top_prob(self) -> float:
        return float(self.probs.max())

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


def point_mass(token: int) -> Dist:
    """All probability on one token: what a deterministic proposer's q is."""
    return Dist(ids=np.array([token]), probs=np.array([1.0]))


def greedy(logits: np.ndarray, cfg: SamplingConfig | None = None) -> int:
    """The argmax token (after `cfg`'s logit bias and grammar, if any): straight from llama.cpp's
    logits view, no copy, when there are none."""
    if cfg is None or (not cfg.logit_bias and cfg.constraint is None):
        return int(np.argmax(logits))
    return int(_best(biased(logits, cfg), 1, cfg.constraint, first=1)[0])


def biased(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """The logits with `cfg.logit_bias` added (a copy), or the logits themselves without one."""
    if not cfg.logit_bias:
        return logits
    scores = np.array(logits, dtype=np.float32)
    ids = np.fromiter((t for t, _ in cfg.logit_bias), dtype=np.int64, count=len(cfg.logit_bias))
    bias = np.fromiter((b for _, b in cfg.logit_bias), dtype=np.float32, count=len(cfg.logit_bias))
    inside = (ids >= 0) & (ids < scores.shape[-1])
    np.add.at(scores, ids[inside], bias[inside])
    return scores


def _best(scores: np.ndarray, want: int, constraint: TokenConstraint | None, first: int = FIRST_ASKED) -> np.ndarray:
    """Ids of the `want` highest scores (all ids when want >= n_vocab) among the tokens the
    constraint allows, best first when a constraint was asked; -inf scores (banned) never count.

    A constraint is asked about the best `first` candidates, then 8 times as many, until enough
    are allowed: the tokens found are exactly the best allowed ones.
    """
    n_vocab = scores.shape[-1]
    if constraint is None:
        ids = np.arange(n_vocab) if want >= n_vocab else top_k_ids(scores, want)
        ids = _not_banned(scores, ids)
        if ids.size == 0:
            raise NoTokenAllowed("every token is banned by the logit bias")
        return ids
    asked = min(n_vocab, max(first, want))
    while True:
        ids = np.arange(n_vocab) if asked >= n_vocab else np.argpartition(scores, -asked)[-asked:]
        ids = _not_banned(scores, ids[np.argsort(-scores[ids], kind="stable")])
        kept = ids[constraint.allowed(ids)] if ids.size else ids
        if kept.size >= want or asked >= n_vocab:
            if kept.size == 0:
                raise NoTokenAllowed("the grammar allows no next token here")
            return kept[:want]
        asked = min(n_vocab, asked * 8)


def _not_banned(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`ids` without the tokens a bias of -inf banned (raw logits are always finite)."""
    finite = scores[ids] > -np.inf
    return ids if finite.all() else ids[finite]


def distribution(logits: np.ndarray, cfg: SamplingConfig) -> Dist:
    """Apply the logit bias and the grammar, then top-k, temperature, top-p (nucleus) and min-p,
    as llama.cpp's samplers do."""
    n_vocab = logits.shape[-1]
    scores = biased(logits, cfg)
    ids = _best(scores, cfg.top_k if 0 < cfg.top_k < n_vocab else n_vocab, cfg.constraint)
    return _truncated(scores, ids, cfg)


def _truncated(scores: np.ndarray, ids: np.ndarray, cfg: SamplingConfig) -> Dist:
    """Temperature, then top-p (nucleus) and min-p over the candidates `ids`, best first: the
    steps `distribution` and `reference_distribution` share, so the two agree bit for bit."""
    scaled = scores[ids].astype(np.float64) / max(cfg.temperature, 1e-6)
    order = np.argsort(-scaled, kind="stable")
    ids, scaled = ids[order], scaled[order]
    probs = np.exp(scaled - scaled[0])
    probs /= probs.sum()
    keep = len(probs)
    if cfg.top_p < 1.0:
        # Smallest prefix whose mass reaches top_p (always at least one token).
        keep = int(np.searchsorted(np.cumsum(probs), cfg.top_p) + 1)
    if cfg.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= cfg.min_p * probs[0])))
    ids, probs = ids[:keep], probs[:keep]
    return Dist(ids=ids, probs=probs / probs.sum())


STRIPES = 32
"""`top_k_ids` reads a row as 32 stripes laid side by side and keeps the k columns with the
highest maxima: 32·k candidates from one pass over the row."""
FAST_FROM_VOCAB = 100_000
"""Below this the plain partition is as fast with the row cold (as it is after a decode): at 32k
0.07 ms against 0.10, at 64k even, at 152k 0.20 against 0.10 (k = 40, here)."""


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits of a row, in no order: the values `np.argpartition(logits,
    -k)[-k:]` picks, found from one pass over the row instead of partitioning all of it."""
    n_vocab = logits.shape[-1]
    if n_vocab < FAST_FROM_VOCAB or n_vocab // STRIPES < 2 * k:  # too few logits to win: partition the row
        return np.argpartition(logits, -k)[-k:]
    return _top_k_by_columns(logits, k)


def _top_k_by_columns(logits: np.ndarray, k: int) -> np.ndarray:
    """The row's first STRIPES·w logits as a (STRIPES, w) grid; a column's maximum is its best.

    Why it is exact: the k-th largest column maximum, `floor`, is reached by k columns, so at
    least k logits are >= floor and the row's k-th largest is too; every one of the k largest
    therefore lies in a column whose maximum is >= floor, and partitioning those columns (and
    the < STRIPES logits past the grid) finds them. One pass (`max` down the columns, which
    numpy runs as an element-wise maximum of the stripes) replaces the old strided sample, the
    comparison of the whole row with its floor and the scan for the ids that passed: ~0.1 ms
    less per 248k row here. A NaN (which `max` propagates) sends the row to the full partition.
    """
    n_vocab = logits.shape[-1]
    width = n_vocab // STRIPES
    grid = logits[: STRIPES * width].reshape(STRIPES, width)
    columns = grid.max(axis=0)
    if np.isnan(columns.max()):
        return np.argpartition(logits, -k)[-k:]
    floor = np.partition(columns, -k)[-k]
    kept = np.flatnonzero(columns >= floor)
    candidates = (np.arange(0, STRIPES * width, width)[:, None] + kept).ravel()
    if STRIPES * width < n_vocab:
        candidates = np.concatenate((candidates, np.arange(STRIPES * width, n_vocab)))
    return candidates[np.argpartition(logits[candidates], -k)[-k:]]


def sample(dist: Dist, rng: np.random.Generator) -> int:
    return int(dist.ids[_draw(dist.probs, rng)])


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw; cheaper than rng.choice for the small arrays we use."""
    index = int(np.searchsorted(np.cumsum(probs), rng.random() * probs.sum(), side="right"))
    return min(index, len(probs) - 1)


def residual(p: Dist, q: Dist) -> Dist:
    """normalize(max(0, p - q)): where the target wants more mass than the draft gave."""
    ids = np.union1d(p.ids, q.ids)
    diff = np.zeros(len(ids))
    diff[np.searchsorted(ids, p.ids)] += p.probs
    diff[np.searchsorted(ids, q.ids)] -= q.probs
    diff = np.maximum(diff, 0.0)
    total = diff.sum()
    if total <= 0.0:  # p == q up to rounding: any draw from p is exact
        return p
    keep = diff > 0
    return Dist(ids=ids[keep], probs=diff[keep] / total)


def reference_distribution(logits: np.ndarray, cfg: SamplingConfig) -> Dist:
    """`distribution` as it was written before issue #27 (a partition of the whole row), kept as
    the plain statement the fast path is held to (tests/test_sampling_fast.py) and as the old path
    scripts/bench_host.py measures against."""
    n_vocab = logits.shape[-1]
    if 0 < cfg.top_k < n_vocab:
        ids = np.argpartition(logits, -cfg.top_k)[-cfg.top_k :]
    else:
        ids = np.arange(n_vocab)
    return _truncated(logits, ids, cfg)


def token_logprobs(logits: np.ndarray, token: int, n_top: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """log p(token) under the model's own distribution (softmax of the raw logits, as
    llama-server reports them), and the `n_top` most likely tokens with theirs."""
    row = np.asarray(logits, dtype=np.float64)
    peak = row.max()
    log_total = peak + np.log(np.exp(row - peak).sum())
    top: tuple[tuple[int, float], ...] = ()
    if n_top > 0:
        n = min(n_top, row.shape[-1])
        ids = np.argpartition(row, -n)[-n:]
        ids = ids[np.argsort(-row[ids], kind="stable")]
        top = tuple((int(i), float(row[i] - log_total)) for i in ids)
    return float(row[token] - log_total), top


def without(dist: Dist, tokens: Sequence[int]) -> Dist | None:
    """`dist` with `tokens` removed and renormalized: what a draw *without replacement* after
    drawing them comes from (a token tree's next sibling). None when nothing is left."""
    keep = ~np.isin(dist.ids, np.asarray(tokens, dtype=dist.ids.dtype))
    total = float(dist.probs[keep].sum())
    if total <= 0.0:
        return None
    return Dist(ids=dist.ids[keep], probs=dist.probs[keep] / total)
