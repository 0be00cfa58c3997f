"""A tiny `qwen35` target carrying one MTP (nextn) layer whose guesses are often right.

Random weights make an MTP head's guesses almost always wrong, which proves nothing, so the
weights are built so that the head computes, one step ahead, the same simple function the target
computes:

- **The target is mostly a bigram model.** Token t's embedding E[t] rides the residual stream
  to the output head, whose row for token sigma(t) (sigma: a fixed random permutation) is
  `bigram_scale * E[t] / |E[t]|`. With x = rmsnorm(E[t]) = sqrt(d) u_t, the logit of sigma(t)
  is `bigram_scale * sqrt(d)` while every other logit is `bigram_scale * sqrt(d) * (u_s . u_t)`,
  about `bigram_scale * N(0, 1)` for random 64-dimensional embeddings: the target's favourite next
  token is sigma(last token), held with probability ~0.5-0.8 at T = 1.
- **Its trunk is a real hybrid, kept small.** The four qwen35 layers (Gated DeltaNet, gated
  attention) are random, their output projections scaled by `trunk_scale`: they add a
  context-dependent perturbation that sometimes moves the argmax away from sigma(last) and
  always reshapes the distribution, so the recurrent state matters (rollback bugs show) and the
  target is not exactly a bigram model.
- **The MTP layer reproduces the bigram one step ahead.** llama.cpp's qwen35 MTP block
  (src/models/qwen35.cpp `graph_mtp`) reads, at position p, the token t_p and the target's
  hidden state h_{p-1}: `eh_proj @ [enorm(E[t_p]); hnorm(h_{p-1})]`, then one gated-attention
  block, then the shared output head. With `eh_proj = [I | 0]` it keeps the token part, so it
  predicts sigma(t_p) = the target's likely t_{p+1}: the head's next-next-token guess agrees with
  the target whenever the trunk does not flip the argmax. Its attention and FFN write small random
  updates (`head_noise`), and its own output norm (`nextn.shared_head_norm`) is `head_sharpen`
  times the target's, so its q is sharper than the target's p: an acceptance rule that ignores
  p/q (always accept) emits q's mode too often and the chi-square test catches it.

Acceptance at T = 0 is the chance that the trunk leaves sigma(last) on top: about 0.5-0.8 with the
defaults (the tests assert it lies strictly inside 0.2..0.95).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tiny_hybrid import HybridSpec, _Init, hybrid_weights, ones, write_hybrid_gguf

TRUNK_OUTPUTS = ("ssm_out", "attn_output", "ffn_down")
N_SPECIAL = 5  # tiny_gguf's control tokens: never the bigram's favourite


@dataclass(frozen=True)
class MtpSpec:
    """Shape and construction constants of the tiny MTP target."""

    hybrid: HybridSpec = field(default_factory=HybridSpec)
    bigram_scale: float = 1.0
    trunk_scale: float = 0.35
    n_attractors: int = 8
    head_scale: float = 0.6
    head_noise: float = 0.05
    head_sharpen: float = 1.4


def bigram_map(n_vocab: int, rng: np.random.Generator) -> np.ndarray:
    """sigma: token -> the token the bigram favours next (a permutation of the normal tokens;
    control tokens map to random normal tokens)."""
    sigma = np.empty(n_vocab, dtype=np.int64)
    sigma[N_SPECIAL:] = N_SPECIAL + rng.permutation(n_vocab - N_SPECIAL)
    sigma[:N_SPECIAL] = rng.integers(N_SPECIAL, n_vocab, N_SPECIAL)
    return sigma


def mtp_target_weights(spec: MtpSpec, seed: int) -> dict[str, np.ndarray]:
    """The trunk (hybrid_weights, scaled down), the bigram head, and the MTP block."""
    h = spec.hybrid
    weights = hybrid_weights(h, seed, deep_scale=1.0)
    init = _Init(seed + 1)
    embeddings = weights["token_embd.weight"]
    units = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    attractors = units[init.rng.choice(np.arange(N_SPECIAL, len(h.tokens)), spec.n_attractors, replace=False)]
    for i in range(h.n_layer):
        for name in TRUNK_OUTPUTS:
            key = f"blk.{i}.{name}.weight"
            if key in weights:  # writes only along a few tokens' directions
                cols = weights[key].shape[1]
                weights[key] = attractors.T @ init.mat(spec.n_attractors, cols, spec.trunk_scale * np.sqrt(h.n_embd))
    sigma = bigram_map(len(h.tokens), init.rng)
    weights["output.weight"] = bigram_head(len(h.tokens), units, [sigma], spec.bigram_scale, init)
    head = bigram_head(len(h.tokens), units, [sigma, sigma[sigma]], spec.head_scale, init)
    return weights | mtp_block(spec, init, h.n_layer, head)


def bigram_head(n_vocab: int, units: np.ndarray, maps: list[np.ndarray], scale: float, init: _Init) -> np.ndarray:
    """Output rows: row m(t) gains `scale * u_t` for each map m (rows no token favours: a little noise)."""
    head = init.mat(n_vocab, units.shape[1], 0.05)
    for favoured in maps:
        np.add.at(head, favoured, scale * units)
    return head.astype(np.float32)


def mtp_block(spec: MtpSpec, init: _Init, index: int, head: np.ndarray | None) -> dict[str, np.ndarray]:
    """One qwen35 MTP block (src/models/qwen35.cpp `load_block_mtp`) that adds the token and the
    hidden part; without `head` it shares the target's output matrix (as Qwen3.5 MTP GGUFs do)."""
    h = spec.hybrid
    d, hd, block = h.n_embd, h.head_dim, f"blk.{index}."
    both = np.hstack([np.eye(d), np.eye(d)]).astype(np.float32)  # [I | I]: token + hidden
    own_head = {} if head is None else {block + "nextn.shared_head_head.weight": head}
    return own_head | {
        block + "attn_norm.weight": ones(d),
        block + "post_attention_norm.weight": ones(d),
        block + "attn_q.weight": init.mat(hd * h.n_head * 2, d),
        block + "attn_k.weight": init.mat(hd * h.n_head_kv, d),
        block + "attn_v.weight": init.mat(hd * h.n_head_kv, d),
        block + "attn_output.weight": init.mat(d, hd * h.n_head, spec.head_noise),
        block + "attn_q_norm.weight": ones(hd),
        block + "attn_k_norm.weight": ones(hd),
        block + "ffn_gate.weight": init.mat(h.n_ff, d),
        block + "ffn_up.weight": init.mat(h.n_ff, d),
        block + "ffn_down.weight": init.mat(d, h.n_ff, spec.head_noise),
        block + "nextn.eh_proj.weight": both,
        block + "nextn.enorm.weight": ones(d),
        block + "nextn.hnorm.weight": ones(d),
        block + "nextn.shared_head_norm.weight": (ones(d) * spec.head_sharpen).astype(np.float32),
    }


def without_heads(weights: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    return {name: w for name, w in weights.items() if not name.startswith(f"blk.{n_layer}.")}


def write_mtp_target(directory: Path, seed: int = 36, spec: MtpSpec | None = None) -> Path:
    """`mtp-target.gguf`: the 4-layer hybrid trunk and one MTP layer (block_count 5)."""
    spec = spec or MtpSpec()
    directory.mkdir(parents=True, exist_ok=True)
    weights = mtp_target_weights(spec, seed)
    return write_hybrid_gguf(directory / "mtp-target.gguf", spec.hybrid, weights, "tiny-qwen35-mtp",
                             nextn_layers=1)


def write_target_without_heads(directory: Path, seed: int = 36, spec: MtpSpec | None = None) -> Path:
    """The same trunk, converted without its MTP layer (like a plain `-GGUF` upload)."""
    spec = spec or MtpSpec()
    directory.mkdir(parents=True, exist_ok=True)
    weights = without_heads(mtp_target_weights(spec, seed), spec.hybrid.n_layer)
    return write_hybrid_gguf(directory / "plain-target.gguf", spec.hybrid, weights, "tiny-qwen35-plain")


def write_shaped_mtp_target(path: Path, spec: HybridSpec, seed: int = 1, f16: bool = False) -> Path:
    """A qwen35 target of any shape with random weights and one MTP layer that shares its output
    matrix: for timings only (its guesses mean nothing). `f16`: matrices in f16, except the
    delta-net conv kernel (llama.cpp's ssm_conv wants f32, as converted GGUFs have it)."""
    weights = hybrid_weights(spec, seed) | mtp_block(MtpSpec(hybrid=spec), _Init(seed + 1), spec.n_layer, None)
    if f16:
        weights = {name: w.astype(np.float16) if w.ndim == 2 and "ssm_conv1d" not in name else w
                   for name, w in weights.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_hybrid_gguf(path, spec, weights, path.stem, nextn_layers=1)
