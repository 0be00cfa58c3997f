"""A tiny `gemma4` target and its `gemma4-assistant` MTP sidecar, built so the assistant's guesses
are often right.

The tensors and keys are those `src/models/gemma4.cpp` and `src/models/gemma4-assistant.cpp`
read (no per-layer embeddings, no MoE). The target has four layers, sliding-window and full
attention alternating, so its last two layers (one of each kind) hold the KV cache the assistant
attends to: llama.cpp shares the assistant's sliding layers with the target's layer n_layer - 2
and its full layers with n_layer - 1 (src/llama-model.cpp:2812-2821), and the assistant has no K/V
of its own.

The construction is tests/tiny_mtp.py's, carried over:

- the target is mostly a bigram model: Gemma scales the input embedding by sqrt(d), each layer's
  attention and FFN outputs are RMS-normalised and scaled by their post-norm weights
  (`trunk_scale`), written along a few "attractor" tokens' directions only, and the output row
  of sigma(t) is `bigram_scale * u_t`;
- the assistant reads [target embedding of t_p * sqrt(d); target hidden h_{p-1}] through
  `nextn.pre_projection` = [P | P] (P: 48 orthonormal rows of 64), so its state is about
  P (u_{t_p} + u_{t_{p-1}}), and its tied output matrix favours sigma(t_p) and sigma(sigma(t_{p-1}))
  along those directions: both name the target's likely next token when the target followed its
  bigram; `nextn.post_projection` = P^T hands the state back for the next chained pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from tiny_gguf import EOS_ID, TinyPair, vocabulary
from tiny_hybrid import _Init, _write, add_tokenizer, ones
from tiny_mtp import N_SPECIAL, bigram_map

SWA_PATTERN = [True, False, True, False]


@dataclass(frozen=True)
class Gemma4Spec:
    n_embd: int = 64
    assistant_embd: int = 48  # must differ from the target's (gemma4-assistant.cpp:30)
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    sliding_window: int = 4096
    bigram_scale: float = 1.0
    head_scale: float = 0.6
    trunk_scale: float = 0.5
    head_noise: float = 0.05
    n_attractors: int = 8


def _common_keys(writer: gguf.GGUFWriter, arch: str, spec: Gemma4Spec, n_embd: int, n_layer: int) -> None:
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_uint32(f"{arch}.attention.key_length_swa", spec.head_dim)
    writer.add_uint32(f"{arch}.attention.value_length_swa", spec.head_dim)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    writer.add_sliding_window(spec.sliding_window)
    writer.add_array(f"{arch}.attention.sliding_window_pattern", SWA_PATTERN[-n_layer:])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def _layer(init: _Init, spec: Gemma4Spec, i: int, d: int, writes: np.ndarray | None,
           post_scale: float, kv: bool) -> dict[str, np.ndarray]:
    """One Gemma 4 block; `writes` (k x d): the directions its outputs may take (None: any)."""
    hd, block = spec.head_dim, f"blk.{i}."

    def out(rows: int, cols: int) -> np.ndarray:
        if writes is None:
            return init.mat(rows, cols)
        return (writes.T @ init.mat(len(writes), cols)).astype(np.float32)

    weights = {
        block + "attn_norm.weight": ones(d),
        block + "attn_q.weight": init.mat(hd * spec.n_head, d),
        block + "attn_output.weight": out(d, hd * spec.n_head),
        block + "attn_q_norm.weight": ones(hd),
        block + "post_attention_norm.weight": (ones(d) * post_scale).astype(np.float32),
        block + "ffn_norm.weight": ones(d),
        block + "ffn_gate.weight": init.mat(spec.n_ff, d),
        block + "ffn_up.weight": init.mat(spec.n_ff, d),
        block + "ffn_down.weight": out(d, spec.n_ff),
        block + "post_ffw_norm.weight": (ones(d) * post_scale).astype(np.float32),
        block + "layer_output_scale.weight": ones(1),
    }
    if kv:
        weights |= {block + "attn_k.weight": init.mat(hd * spec.n_head_kv, d),
                    block + "attn_v.weight": init.mat(hd * spec.n_head_kv, d),
                    block + "attn_k_norm.weight": ones(hd)}
    return weights


def write_gemma4_pair(directory: Path, seed: int = 44, spec: Gemma4Spec | None = None) -> TinyPair:
    """`gemma4-target.gguf` and its sidecar `mtp-gemma4-target.gguf`."""
    spec = spec or Gemma4Spec()
    directory.mkdir(parents=True, exist_ok=True)
    tokens = tuple(vocabulary())
    n_vocab, d, a = len(tokens), spec.n_embd, spec.assistant_embd
    init = _Init(seed)
    embeddings = (init.rng.standard_normal((n_vocab, d)) / np.sqrt(d)).astype(np.float32)
    units = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    attractors = units[init.rng.choice(np.arange(N_SPECIAL, n_vocab), spec.n_attractors, replace=False)]
    sigma = bigram_map(n_vocab, init.rng)
    head = init.mat(n_vocab, d, 0.05)
    np.add.at(head, sigma, spec.bigram_scale * units)
    target = {"token_embd.weight": embeddings, "output_norm.weight": ones(d), "output.weight": head,
              "rope_freqs.weight": ones(spec.head_dim // 2)}
    for i in range(len(SWA_PATTERN)):
        target |= _layer(init, spec, i, d, attractors, spec.trunk_scale, kv=True)
    target_path = directory / "gemma4-target.gguf"
    writer = gguf.GGUFWriter(str(target_path), "gemma4")
    writer.add_name("tiny-gemma4")
    _common_keys(writer, "gemma4", spec, d, len(SWA_PATTERN))
    writer.add_uint32("gemma4.embedding_length_per_layer_input", 0)
    add_tokenizer(writer, tokens, EOS_ID)
    _write(writer, target)

    project = np.linalg.qr(init.rng.standard_normal((d, d)))[0][:a].astype(np.float32)  # P: a x d
    directions = units @ project.T
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    own_head = init.mat(n_vocab, a, 0.05)
    for favoured in (sigma, sigma[sigma]):
        np.add.at(own_head, favoured, spec.head_scale * directions)
    assistant = {"token_embd.weight": own_head, "output_norm.weight": ones(a),
                 "nextn.pre_projection.weight": np.hstack([project, project]),
                 "nextn.post_projection.weight": np.ascontiguousarray(project.T),
                 "rope_freqs.weight": ones(spec.head_dim // 2)}
    for i in range(2):
        assistant |= _layer(init, spec, i, a, None, spec.head_noise, kv=False)
    sidecar_path = directory / "mtp-gemma4-target.gguf"
    writer = gguf.GGUFWriter(str(sidecar_path), "gemma4-assistant")
    writer.add_name("tiny-gemma4-assistant")
    _common_keys(writer, "gemma4-assistant", spec, a, 2)
    writer.add_uint32("gemma4-assistant.embedding_length_out", d)
    writer.add_uint32("gemma4-assistant.nextn_predict_layers", 2)
    add_tokenizer(writer, tokens, EOS_ID)
    _write(writer, assistant)
    return TinyPair(target=target_path, draft=sidecar_path)
