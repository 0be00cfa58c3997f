"""From logits to a processed next-token distribution, and drawing from it.

Target and draft go through the *same* processing (temperature, top-k, top-p, min-p), so the
speculative rule compares like with like: the output is distributed exactly as the target's
processed distribution. Distributions are sparse (`ids`, `probs`): top-k keeps the work small
even for a 262k-token vocabulary.

`reference_distribution` is the processing written plainly (a partition of the whole row);
`distribution` computes the same thing faster and is what the engine calls. On a GPU a verify
pass of a 7B model takes ~10-20 ms, and partitioning K+1 rows of a 248k vocabulary took ~0.3 ms
per row here, so the top-k ids are found from a strided sample first (`top_k_ids`); the tests
hold the two to the same distribution on random rows with ties, and `scripts/bench_host.py`
measures both in one run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from spectui.engine.config import SamplingConfig


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


def greedy(logits: np.ndarray) -> int:
    """The argmax token, straight from llama.cpp's logits view (no copy)."""
    return int(np.argmax(logits))


def distribution(logits: np.ndarray, cfg: SamplingConfig) -> Dist:
    """Apply temperature, then top-k, top-p (nucleus) and min-p, as llama.cpp's samplers do.

    The same distribution as `reference_distribution`, bit for bit: the same top-k values go
    through the same float64 steps in the same order, so the probabilities come out identical.
    Only where logits tie may the ids differ: which of the ids tied at the k-th largest logit are
    kept, and the order of tied ids at a top-p cut, are a partition's arbitrary choice in both.
    """
    n_vocab = logits.shape[-1]
    if 0 < cfg.top_k < n_vocab:
        ids = top_k_ids(logits, cfg.top_k)
    else:
        ids = np.arange(n_vocab)
    scaled = logits[ids].astype(np.float64) / max(cfg.temperature, 1e-6)
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


SAMPLE_STRIDE = 32
"""`top_k_ids` samples every 32nd logit: about 32·k ids then pass its floor (fastest of 8-128
on a 248k row here: ~0.12 ms against ~0.33 ms for partitioning the row, cache cold)."""
FAST_FROM_VOCAB = 100_000
"""Below this the plain partition is as fast with the row cold (as it is after a decode): at 32k
0.07 ms against 0.10, at 64k even, at 152k 0.20 against 0.10 (k = 40, here)."""
_buffers = threading.local()


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits of a row, in no order: the values `np.argpartition(logits,
    -k)[-k:]` picks, found by reading the row twice instead of partitioning all of it.

    Why it is exact: once at least k logits of the row are >= `floor`, its k-th largest is too,
    so every one of its k largest is among the ids >= floor, and a partition of those few finds
    them. The sample's k-th largest is such a floor (the sample is part of the row), so the check
    below fails only for a row with NaN (which compares false), and then the row is partitioned.
    """
    n_vocab = logits.shape[-1]
    sample = logits[::SAMPLE_STRIDE]
    if n_vocab < FAST_FROM_VOCAB or sample.size < 2 * k:  # too few logits to win: partition the row
        return np.argpartition(logits, -k)[-k:]
    floor = np.partition(sample, -k)[-k]
    candidates = np.flatnonzero(np.greater_equal(logits, floor, out=_mask(n_vocab)))
    if candidates.size < k:  # NaN in the row (compares false): leave it to the full partition
        return np.argpartition(logits, -k)[-k:]
    return candidates[np.argpartition(logits[candidates], -k)[-k:]]


def _mask(n_vocab: int) -> np.ndarray:
    """A boolean row reused per thread: a fresh 248 KB array each call costs page faults."""
    mask = getattr(_buffers, "mask", None)
    if mask is None or mask.shape[0] != n_vocab:
        mask = _buffers.mask = np.empty(n_vocab, dtype=bool)
    return mask


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
    scaled = logits[ids].astype(np.float64) / max(cfg.temperature, 1e-6)
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
