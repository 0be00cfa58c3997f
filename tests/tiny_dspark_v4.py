"""A tiny DeepSeek-V4 DSpark head: tests/tiny_dflash.py's DSpark head (its fc, norms, lm head,
embeddings and Markov head) with its decoder layer replaced by one DeepSeek-V4 stage, the graph
llama.cpp builds when `dflash.hyper_connection.count` > 0 (src/models/dflash.cpp:51-92, 858-1012):
4 hyper-connection streams mixed by Sinkhorn-normalised combinations, MLA attention (a low-rank
query, one shared K = V row per position injected from the target's features into a
sliding-window cache, attention sinks, a grouped low-rank output), a MoE of two experts with
sqrt-softplus routing plus a shared expert, and the hyper-connection head.

The stage's weights are random (`stage_scale` sets how much the block's rows depend on what the
stage reads: the injected features and the block itself); the Markov head still favours
sigma(previous token), so drafts are accepted often enough to measure. Dimensions: width 64 (the
target's), 2 heads of 32 (16 rotated), query rank 16, output rank 16 in 1 group, experts 32 wide.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import tiny_dflash
from tiny_bigram import BigramTarget
from tiny_gguf import vocabulary
from tiny_hybrid import _write, add_tokenizer, ones

HC, N_HEAD, HEAD_DIM, N_ROT, Q_RANK, O_RANK, N_EXPERT, N_FF = 4, 2, 32, 16, 16, 16, 2, 32
SLIDING_WINDOW = 64
SQRT_SOFTPLUS = 4  # LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS (src/llama-hparams.h:21)
BORROWED = ("markov_w1.weight", "markov_w2.weight", "fc.weight", "enc.output_norm.weight", "output_norm.weight",
            "token_embd.weight", "output.weight")


def stage_weights(d: int, stage_scale: float, seed: int, hc: int = HC) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def mat(*shape: int, scale: float = stage_scale) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    mix = (2 + hc) * hc
    b = "blk.0."
    weights = {
        "output_hc_fn.weight": mat(hc, hc * d), "output_hc_base.weight": np.zeros(hc, np.float32),
        "output_hc_scale.weight": ones(1),
        b + "attn_norm.weight": ones(d), b + "attn_sinks.weight": np.zeros(N_HEAD, np.float32),
        b + "attn_q_a.weight": mat(Q_RANK, d), b + "attn_q_a_norm.weight": ones(Q_RANK),
        b + "attn_q_b.weight": mat(N_HEAD * HEAD_DIM, Q_RANK), b + "attn_kv.weight": mat(HEAD_DIM, d),
        b + "attn_kv_a_norm.weight": ones(HEAD_DIM), b + "attn_output_a.weight": mat(1, O_RANK, N_HEAD * HEAD_DIM),
        b + "attn_output_b.weight": mat(d, O_RANK),
        b + "ffn_gate_inp.weight": mat(N_EXPERT, d), b + "exp_probs_b.bias": np.zeros(N_EXPERT, np.float32),
        b + "ffn_norm.weight": ones(d), b + "ffn_gate_exps.weight": mat(N_EXPERT, N_FF, d),
        b + "ffn_down_exps.weight": mat(N_EXPERT, d, N_FF), b + "ffn_up_exps.weight": mat(N_EXPERT, N_FF, d),
        b + "ffn_gate_shexp.weight": mat(N_FF, d), b + "ffn_down_shexp.weight": mat(d, N_FF),
        b + "ffn_up_shexp.weight": mat(N_FF, d),
    }
    for side in ("attn", "ffn"):
        weights |= {b + f"hc_{side}_fn.weight": mat(mix, hc * d),
                    b + f"hc_{side}_base.weight": np.zeros(mix, np.float32), b + f"hc_{side}_scale.weight": ones(3)}
    return weights


def write_dspark_v4_head(path: Path, target: BigramTarget, *, stage_scale: float = 1.0, hc: int = HC,
                         sliding_window: int = SLIDING_WINDOW, seed: int = 5) -> Path:
    """A `dflash` GGUF with DeepSeek-V4 stages and a Markov head, drafting for `target`."""
    d = target.n_embd
    layers = (0, target.n_layer // 2, target.n_layer - 1)
    base = tiny_dflash.head_weights(target, tiny_dflash.DFlashSpec(markov_rank=16), len(layers), seed)
    weights = {name: base[name] for name in BORROWED} | stage_weights(d, stage_scale, seed, hc)
    writer = gguf.GGUFWriter(str(path), "dflash")
    writer.add_name(path.stem)
    writer.add_context_length(4096)
    writer.add_embedding_length(d)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(1)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_dimension_count(N_ROT)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32("dflash.block_size", 8)
    writer.add_array("dflash.target_layers", list(layers))
    for key, value in (("hyper_connection.count", hc), ("hyper_connection.sinkhorn_iterations", 3),
                       ("attention.q_lora_rank", Q_RANK), ("attention.sliding_window", sliding_window),
                       ("attention.output_group_count", 1), ("attention.output_lora_rank", O_RANK),
                       ("expert_count", N_EXPERT), ("expert_used_count", 1), ("expert_feed_forward_length", N_FF),
                       ("expert_shared_count", 1), ("expert_gating_func", SQRT_SOFTPLUS)):
        writer.add_uint32(f"dflash.{key}", value)
    writer.add_float32("dflash.hyper_connection.epsilon", 1e-6)
    writer.add_array("dflash.attention.compress_ratios", [0])
    writer.add_float32("dflash.expert_weights_scale", 1.0)
    writer.add_bool("dflash.expert_weights_norm", True)
    writer.add_float32("dflash.swiglu_clamp_exp", 0.0)  # 0: no clamp (llama-graph.cpp:2239)
    writer.add_vocab_size(target.n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(writer, tuple(vocabulary()), 1)
    writer.add_uint32("tokenizer.ggml.mask_token_id", tiny_dflash.MASK_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(writer, weights)
    return path
