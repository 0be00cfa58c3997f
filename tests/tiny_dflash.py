"""A tiny DFlash head (`dflash` arch) for a tests/tiny_bigram.py target, built to guess right often.

The keys and tensors are those llama.cpp reads (src/models/dflash.cpp `load_arch_hparams` /
`load_arch_tensors`, plain DFlash: no selector, no Markov head): `dflash.target_layers`,
`dflash.block_size`, `tokenizer.ggml.mask_token_id`, `fc` + `enc.output_norm` (the target
features, fused), one Qwen3-style decoder layer (q/k norms, partial NeoX rope), and here its own
`token_embd` and `output` (so it references no target tensor and needs no `ctx_other`).

DFlash drafts a whole block in one pass: the target's features at positions < n sit in the head's
KV cache (K and V of `fc` + norm, injected as embedding-only batches), and the block
[last, MASK, MASK, ...] at positions n, n + 1, ... attends to them and to itself (non-causal); row
i's logits name the token at n + i. The weights make row 1 guess the target's next token:

- **Dimensions.** The head is 64 wide like the target: 0-23 carry a token's content (its own
  embedding: a random unit vector r_t), 24-47 the target's features (P h, P: 24 x 64 random
  projection of the target's input of its last layer h), 48 flags "a real token", 49 "the mask
  token", 50 "a target feature" (from the target's constant embedding dimension, tap 0).
- **Head A copies `last`.** Its query reads the mask flag, its key the real-token flag, in
  un-rotated dimensions (`rope.dimension_count` 16 of 32 per head); the q/k norms make every such
  score the same large number, and every other key scores 0. So each mask row attends to the
  block's one real token, `last`, and takes its content r_last.
- **Head B reads the feature two positions back.** Its query (from the mask flag) and key (from
  the feature flag) sit in the three fastest NeoX rope pairs (theta 1, 0.316, 0.1) with the key
  turned by 2 theta_j, so the score is proportional to sum_j cos(theta_j (delta - 2)),
  delta = query position - key position: highest at delta = 2, and ~12 (after scaling) below it
  at the neighbours. Row n + 1 thus reads the target's features at n - 1: P h_{n-1}.
- **The output.** The head's own output matrix gives row sigma(t) `head_scale * r_t` (dims 0-23)
  and row sigma(sigma(t)) `head_scale * P u_t / |P u_t|` (dims 24-47): row 1's state
  [r_last ; P h_{n-1}] favours sigma(last) twice when the target followed its bigram
  (last = sigma(t_{n-1})), once otherwise. Features at the wrong positions guess clearly worse.
- **Not exact.** The FFN writes small random updates and `output_norm` is `head_sharpen`: q is
  sharper than the target's p, so a rule that skips rejection sampling is caught.

Row 1 agrees with the target about as often as the bigram holds (~0.5-0.8 at T = 0). Rows 2 and
on read the same state (head B finds no feature at n, so it settles on n - 1 again) and repeat
row 1's guess, which is right only when the target repeats a token: acceptance falls along the
block, as it does for real DFlash heads, only faster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from tiny_bigram import BigramTarget
from tiny_gguf import SPECIAL_TOKENS, vocabulary
from tiny_hybrid import _Init, _write, add_tokenizer, ones

MASK_ID = SPECIAL_TOKENS.index("<pad>")
TOKEN, FEATURE = slice(0, 24), slice(24, 48)
REAL_FLAG, MASK_FLAG, FEATURE_FLAG = 48, 49, 50
HEAD_DIM, N_ROT = 32, 16
READ_BACK = 2  # head B peaks at this many positions before the query
CONFIDENCE_SCALE = 8.0  # u . W1[prev] of unit vectors in 16 dimensions: about +-0.25, so about sigmoid(+-2)


@dataclass(frozen=True)
class DFlashSpec:
    n_ff: int = 128
    block_size: int = 8
    copy_weight: float = 2.0
    """Head A's q/k norm weight: scores 5.66 * w^2 for (mask row, real token), 0 otherwise."""
    seek_weight: float = 3.5
    """Head B's q/k norm weight: 1.89 * w^2 * sum_j cos(theta_j (delta - 2))."""
    head_scale: float = 0.6
    head_noise: float = 0.05
    head_sharpen: float = 1.4
    target_layers: tuple[int, ...] | None = None
    """None: (0, n_layer // 2, n_layer - 1); fc reads tap 0 (the constant) and the last tap."""
    mask_token: int | None = MASK_ID
    markov_rank: int = 0
    """DSpark: a Markov head of this rank (`markov_w1`/`markov_w2`) favouring sigma(previous token)."""
    markov_scale: float = 5.0
    sample_from_anchor: bool | None = None
    """DSpark: `dflash.sample_from_anchor` (None: the key absent, which llama.cpp reads as true)."""
    confidence: bool = False
    """DSpark: a confidence head (`conf_proj`) reading only W1[prev]: sigmoid(CONFIDENCE_SCALE u . W1[prev])."""
    selector_top_k: int = 0
    """DFlash2: a selector lattice over this many candidates per position (conv + selector tensors)."""
    selector_rank: int = 16
    selector_scale: float = 3.0
    conv_kernel: int = 2
    conv_group: int = 16


def rope_theta(j: int) -> float:
    return 10000.0 ** (-2.0 * j / N_ROT)


def head_weights(target: BigramTarget, spec: DFlashSpec, n_taps: int, seed: int) -> dict[str, np.ndarray]:
    init = _Init(seed)
    d, n_vocab, sigma = target.n_embd, target.n_vocab, target.sigma
    content = init.rng.standard_normal((n_vocab, TOKEN.stop - TOKEN.start))
    content /= np.linalg.norm(content, axis=1, keepdims=True)
    embeddings = np.zeros((n_vocab, d), dtype=np.float32)
    embeddings[:, TOKEN] = content * 2.0
    embeddings[:, REAL_FLAG] = 2.0
    embeddings[MASK_ID] = 0.0
    embeddings[MASK_ID, MASK_FLAG] = 2.0
    projection = init.rng.standard_normal((FEATURE.stop - FEATURE.start, d)) / np.sqrt(d)
    fc = np.zeros((d, n_taps * d), dtype=np.float32)
    fc[FEATURE, (n_taps - 1) * d : n_taps * d] = projection  # the last tap: the target's h
    fc[FEATURE_FLAG, d - 1] = 1.0  # tap 0's constant dimension
    output = init.mat(n_vocab, d, 0.05)
    projected = target.units @ projection.T
    for favoured in (sigma, sigma[sigma]):  # the token alone cannot tell sigma from sigma o sigma
        np.add.at(output[:, TOKEN], favoured, spec.head_scale * content)
    np.add.at(output[:, FEATURE], sigma[sigma], spec.head_scale * projected / np.linalg.norm(projected, axis=1,
                                                                                              keepdims=True))
    extra: dict[str, np.ndarray] = {}
    pairs = init.rng.standard_normal((n_vocab, max(spec.markov_rank, spec.selector_rank)))
    pairs /= np.linalg.norm(pairs, axis=1, keepdims=True)
    if spec.markov_rank:  # bias(prev)[v] = w2[v] . w1[prev]: highest at v = sigma(prev)
        w1 = pairs[:, : spec.markov_rank]
        w2 = np.zeros_like(w1)
        w2[sigma] = spec.markov_scale * w1
        extra |= {"markov_w1.weight": w1.astype(np.float32), "markov_w2.weight": w2.astype(np.float32)}
        if spec.confidence:  # [the row's state (weight 0 here); W1[prev]] -> one logit (dflash.cpp:369-379)
            conf = np.zeros((1, d + spec.markov_rank), dtype=np.float32)
            u = np.random.default_rng(seed).standard_normal(spec.markov_rank)  # the other weights as without it
            conf[0, d:] = CONFIDENCE_SCALE * u / np.linalg.norm(u)
            extra |= {"conf_proj.weight": conf, "conf_proj.bias": np.zeros(1, dtype=np.float32)}
    if spec.selector_top_k:
        extra |= _selector(spec, pairs[:, : spec.selector_rank], sigma, d)
    return extra | {
        "token_embd.weight": embeddings,
        "output.weight": output.astype(np.float32),
        "fc.weight": fc,
        "enc.output_norm.weight": ones(d),
        "output_norm.weight": (ones(d) * spec.head_sharpen).astype(np.float32),
        **_attention(d),
        "blk.0.attn_q_norm.weight": _norm_weights(spec),
        "blk.0.attn_k_norm.weight": _norm_weights(spec),
        "blk.0.ffn_norm.weight": ones(d),
        "blk.0.ffn_gate.weight": init.mat(spec.n_ff, d),
        "blk.0.ffn_up.weight": init.mat(spec.n_ff, d),
        "blk.0.ffn_down.weight": init.mat(d, spec.n_ff, spec.head_noise),
    }


def _attention(d: int) -> dict[str, np.ndarray]:
    """Two heads of 32: A (rows 0-31 of q/k/v) copies `last`, B (rows 32-63) reads a feature."""
    q, k, v, o = (np.zeros((2 * HEAD_DIM, d), dtype=np.float32) for _ in range(4))
    q[N_ROT, MASK_FLAG] = k[N_ROT, REAL_FLAG] = 1.0  # head A, un-rotated dimension 16
    half = N_ROT // 2
    for j in range(3):  # head B, NeoX pairs (j, j + 8)
        angle = READ_BACK * rope_theta(j)
        q[HEAD_DIM + j, MASK_FLAG] = 1.0
        k[HEAD_DIM + j, FEATURE_FLAG] = np.cos(angle)
        k[HEAD_DIM + j + half, FEATURE_FLAG] = np.sin(angle)
    width = TOKEN.stop - TOKEN.start
    v[0:width, TOKEN] = np.eye(width)
    v[HEAD_DIM : HEAD_DIM + width, FEATURE] = np.eye(width)
    o[TOKEN, 0:width] = np.eye(width)
    o[FEATURE, HEAD_DIM : HEAD_DIM + width] = np.eye(width)
    return {"blk.0.attn_norm.weight": ones(d), "blk.0.attn_q.weight": q, "blk.0.attn_k.weight": k,
            "blk.0.attn_v.weight": v, "blk.0.attn_output.weight": o}


def _selector(spec: DFlashSpec, pairs: np.ndarray, sigma: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """DFlash2: identity convolutions (tap 0's base weight 1, no dynamic part) and a selector whose
    pair score next[c] . (prev[p] * gate) is highest for c = sigma(p) (gate: the mask flag's
    share of the normalised state, the same for every mask row)."""
    groups = d // spec.conv_group
    base = np.zeros((2, spec.conv_kernel, d), dtype=np.float32)
    base[:, 0, :] = 1.0
    proj = np.zeros((2 * spec.conv_kernel * groups, d), dtype=np.float32)
    hidden = np.zeros((spec.selector_rank, d), dtype=np.float32)
    hidden[:, MASK_FLAG] = spec.selector_scale
    nxt = np.zeros_like(pairs)
    nxt[sigma] = pairs
    conv = {f"blk.0.{side}_conv_{part}": value for side in ("attn", "ffn")
            for part, value in (("base", base), ("proj.weight", proj))}
    return conv | {"selector_predecessor.weight": pairs.astype(np.float32),
                   "selector_successor.weight": nxt.astype(np.float32), "selector_hidden.weight": hidden}


def _norm_weights(spec: DFlashSpec) -> np.ndarray:
    w = ones(HEAD_DIM)
    w[N_ROT] = spec.copy_weight
    for j in range(3):
        w[j] = w[j + N_ROT // 2] = spec.seek_weight
    return w


def write_dspark_head(path: Path, target: BigramTarget, spec: DFlashSpec | None = None, seed: int = 5) -> Path:
    """A DSpark head: the DFlash head above with a Markov head of rank 16 (anchor-first layout)."""
    return write_dflash_head(path, target, spec or DFlashSpec(markov_rank=16), seed)


def write_dflash2_head(path: Path, target: BigramTarget, spec: DFlashSpec | None = None, seed: int = 5) -> Path:
    """A DFlash2 head: the DFlash head above with a selector lattice over 4 candidates."""
    return write_dflash_head(path, target, spec or DFlashSpec(selector_top_k=4), seed)


def write_dflash_head(path: Path, target: BigramTarget, spec: DFlashSpec | None = None, seed: int = 5) -> Path:
    """A `dflash` GGUF drafting for `target`, with `target`'s tokenizer and a mask token."""
    spec = spec or DFlashSpec()
    layers = spec.target_layers or (0, target.n_layer // 2, target.n_layer - 1)
    d = target.n_embd
    weights = head_weights(target, spec, len(layers), seed)
    writer = gguf.GGUFWriter(str(path), "dflash")
    writer.add_name(path.stem)
    writer.add_context_length(4096)
    writer.add_embedding_length(d)
    writer.add_block_count(1)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_dimension_count(N_ROT)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32("dflash.block_size", spec.block_size)
    writer.add_array("dflash.target_layers", list(layers))
    writer.add_vocab_size(target.n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(writer, tuple(vocabulary()), 1)
    if spec.mask_token is not None:
        writer.add_uint32("tokenizer.ggml.mask_token_id", spec.mask_token)
    if spec.sample_from_anchor is not None:
        writer.add_bool("dflash.sample_from_anchor", spec.sample_from_anchor)
    if spec.selector_top_k:
        for key, value in (("selector_top_k", spec.selector_top_k), ("selector_rank", spec.selector_rank),
                           ("conv_kernel_size", spec.conv_kernel), ("conv_group_size", spec.conv_group)):
            writer.add_uint32(f"dflash.{key}", value)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(writer, weights)
    return path

