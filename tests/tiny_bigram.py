"""Tiny targets for the feature-level heads (EAGLE-3, DFlash): mostly bigram models whose hidden
states a head can read.

Two targets, one attention-only and one hybrid, built as tests/tiny_mtp.py builds its trunk:

- **Mostly a bigram model.** The output row of sigma(t) (sigma: a fixed random permutation of the
  normal tokens) is `bigram_scale * u_t` (u_t: token t's embedding, unit length), so the target's
  favourite next token is sigma(last token), held with probability ~0.5-0.8 at T = 1.
- **A trunk that perturbs it.** Every layer's output projections write only along a few
  "attractor" tokens' directions, scaled by `trunk_scale`: a context-dependent push that sometimes
  moves the argmax away from sigma(last), so the target is not exactly a bigram model and its
  state (KV cache; the recurrent state of the hybrid) matters.
- **One constant embedding dimension.** Every token embedding holds `constant` in its last
  dimension, so the input of layer 0 (the token embeddings, tap 0) carries a component that is
  the same at every position: tests/tiny_dflash.py builds a position-seeking attention key from it.

`llama_target` is a 4-layer `llama` (an attention KV cache: any rollback is a `seq_rm`);
`hybrid_target` is tests/tiny_mtp.py's 4-layer `qwen35` trunk (Gated DeltaNet + gated attention,
rolled back by recurrent-state snapshots and checkpoints) without its MTP layer. Both tap every
layer input (`res->t_layer_inp[il]`, src/models/llama.cpp:127 and qwen35.cpp:156).

`BigramTarget.sigma` is read back from the written weights (the argmax of the output head over
each normalised embedding), so a head is built against exactly the target that was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tiny_mtp
from tiny_gguf import TinySpec, random_weights, write_gguf
from tiny_hybrid import _Init, write_hybrid_gguf
from tiny_mtp import N_SPECIAL, MtpSpec, bigram_head, bigram_map

CONSTANT = 2.0
"""The value every token embedding holds in its last dimension."""


@dataclass(frozen=True)
class BigramTarget:
    """A written target and what a head needs to know about it."""

    path: Path
    weights: dict[str, np.ndarray]
    sigma: np.ndarray
    """token -> the token the bigram favours next (argmax of the output head)."""
    n_layer: int

    @property
    def embeddings(self) -> np.ndarray:
        return self.weights["token_embd.weight"]

    @property
    def units(self) -> np.ndarray:
        e = self.embeddings
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    @property
    def n_embd(self) -> int:
        return self.embeddings.shape[1]

    @property
    def n_vocab(self) -> int:
        return self.embeddings.shape[0]


def favourite_next(weights: dict[str, np.ndarray]) -> np.ndarray:
    """sigma as the written target computes it: argmax of output @ rmsnorm(embedding) per token."""
    e = weights["token_embd.weight"]
    normed = e / np.sqrt((e**2).mean(axis=1, keepdims=True))
    return np.argmax(normed @ weights["output.weight"].T, axis=1)


def with_constant_dimension(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    e = weights["token_embd.weight"].copy()
    e[:, -1] = CONSTANT
    return weights | {"token_embd.weight": e}


def llama_weights(spec: TinySpec, seed: int, bigram_scale: float = 1.0, trunk_scale: float = 0.22,
                  n_attractors: int = 8) -> dict[str, np.ndarray]:
    """tiny_gguf's random llama layers, their output projections writing along attractors only,
    and a bigram output head."""
    weights = with_constant_dimension(random_weights(spec, seed))
    init = _Init(seed + 1)
    units = weights["token_embd.weight"] / np.linalg.norm(weights["token_embd.weight"], axis=1, keepdims=True)
    n_vocab, d = units.shape
    attractors = units[init.rng.choice(np.arange(N_SPECIAL, n_vocab), n_attractors, replace=False)]
    for i in range(spec.n_layer):
        for name in ("attn_output", "ffn_down"):
            key = f"blk.{i}.{name}.weight"
            cols = weights[key].shape[1]
            weights[key] = attractors.T @ init.mat(n_attractors, cols, trunk_scale * np.sqrt(d))
    sigma = bigram_map(n_vocab, init.rng)
    weights["output.weight"] = bigram_head(n_vocab, units, [sigma], bigram_scale, init)
    return weights


def llama_target(directory: Path, seed: int = 29, spec: TinySpec | None = None) -> BigramTarget:
    """`bigram-llama.gguf`: 4 attention layers, n_embd 64."""
    spec = spec or TinySpec()
    directory.mkdir(parents=True, exist_ok=True)
    weights = llama_weights(spec, seed)
    path = write_gguf(directory / "bigram-llama.gguf", spec, weights, "tiny-bigram-llama")
    return BigramTarget(path, weights, favourite_next(weights), spec.n_layer)


def hybrid_target(directory: Path, seed: int = 36, spec: MtpSpec | None = None) -> BigramTarget:
    """`bigram-qwen35.gguf`: tests/tiny_mtp.py's hybrid trunk without its MTP layer."""
    spec = spec or MtpSpec()
    directory.mkdir(parents=True, exist_ok=True)
    trunk = tiny_mtp.without_heads(tiny_mtp.mtp_target_weights(spec, seed), spec.hybrid.n_layer)
    weights = with_constant_dimension(trunk)
    path = write_hybrid_gguf(directory / "bigram-qwen35.gguf", spec.hybrid, weights, "tiny-bigram-qwen35")
    return BigramTarget(path, weights, favourite_next(weights), spec.hybrid.n_layer)

