"""From logits to a processed next-token distribution, and drawing from it.

Target and draft go through the *same* processing (temperature, top-k, top-p, min-p), so the
speculative rule compares like with like: the output is distributed exactly as the target's
processed distribution. Distributions are sparse (`ids`, `probs`): top-k keeps the work small
even for a 262k-token vocabulary.
"""

from __future__ import annotations

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
    """Apply temperature, then top-k, top-p (nucleus) and min-p, as llama.cpp's samplers do."""
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
