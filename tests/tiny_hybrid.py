"""Generate tiny recurrent and hybrid GGUF models for the test suite.

- A `qwen35` target (Qwen3.5/3.6's architecture in llama.cpp): Gated-DeltaNet recurrent layers
  interleaved with gated full-attention layers (`full_attention_interval` 2: recurrent,
  attention, recurrent, attention), with the tensors and hyperparameters that
  `src/models/qwen35.cpp` (`load_arch_hparams`, `load_arch_tensors`) reads.
- A correlated `qwen35` draft: the target's embeddings, output head and first two layers (one
  recurrent, one attention), so greedy acceptance lands strictly between 0 and 1.
- A `mamba` model: purely recurrent, and not in llama.cpp's `llm_arch_supports_rs_rollback`, so
  its state cannot be rolled back at all.

All share `tiny_gguf`'s byte-level BPE vocabulary, so they tokenize like the attention pair.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
from tiny_gguf import BOS_ID, CHATML_TEMPLATE, EOS_ID, MERGES, SPECIAL_TOKENS, TinyPair, vocabulary


@dataclass(frozen=True)
class HybridSpec:
    """Shape of a tiny qwen35 model."""

    n_layer: int = 4
    full_attention_interval: int = 2
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    ssm_conv_kernel: int = 4
    ssm_state_size: int = 16  # head size of the delta-net keys and values
    ssm_group_count: int = 2  # key heads
    ssm_time_step_rank: int = 4  # value heads
    context_length: int = 4096
    eos_id: int = EOS_ID
    tokens: tuple[str, ...] = tuple(vocabulary())

    @property
    def ssm_inner_size(self) -> int:
        return self.ssm_state_size * self.ssm_time_step_rank

    @property
    def conv_dim(self) -> int:
        return 2 * self.ssm_state_size * self.ssm_group_count + self.ssm_inner_size

    def is_recurrent(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval != 0


def add_tokenizer(writer: gguf.GGUFWriter, tokens: tuple[str, ...], eos_id: int) -> None:
    """tiny_gguf's gpt2-style tokenizer metadata, ChatML template included."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(list(tokens))
    n_special = len(SPECIAL_TOKENS)
    writer.add_token_types(
        [gguf.TokenType.CONTROL] * n_special + [gguf.TokenType.NORMAL] * (len(tokens) - n_special)
    )
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(eos_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)


def _write(writer: gguf.GGUFWriter, weights: dict[str, np.ndarray]) -> None:
    for name, tensor in weights.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class _Init:
    """Random tensors; numpy shape (rows, cols) is llama.cpp's {cols, rows}."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def mat(self, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    def vec(self, n: int, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
        return (self.rng.standard_normal(n) * scale + offset).astype(np.float32)


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def hybrid_weights(spec: HybridSpec, seed: int, logit_scale: float = 6.0,
                   deep_scale: float = 0.35) -> dict[str, np.ndarray]:
    """Random qwen35 weights; layers past the first two write small updates (`deep_scale`), so a
    2-layer draft tracks the target closely but not exactly."""
    init = _Init(seed)
    d, n_vocab = spec.n_embd, len(spec.tokens)
    weights = {
        "token_embd.weight": init.rng.standard_normal((n_vocab, d)).astype(np.float32),
        "output_norm.weight": ones(d),
        "output.weight": init.mat(n_vocab, d, logit_scale),
    }
    for i in range(spec.n_layer):
        out_scale = 1.0 if i < 2 else deep_scale
        block = f"blk.{i}."
        weights |= {block + "attn_norm.weight": ones(d), block + "post_attention_norm.weight": ones(d)}
        if spec.is_recurrent(i):
            weights |= _delta_net_layer(init, spec, block, out_scale)
        else:
            weights |= _attention_layer(init, spec, block, out_scale)
        weights |= {
            block + "ffn_gate.weight": init.mat(spec.n_ff, d),
            block + "ffn_up.weight": init.mat(spec.n_ff, d),
            block + "ffn_down.weight": init.mat(d, spec.n_ff, out_scale),
        }
    return weights


def _delta_net_layer(init: _Init, spec: HybridSpec, block: str, out_scale: float) -> dict[str, np.ndarray]:
    d, v_heads = spec.n_embd, spec.ssm_time_step_rank
    return {
        block + "attn_qkv.weight": init.mat(spec.conv_dim, d),
        block + "attn_gate.weight": init.mat(spec.ssm_inner_size, d),
        block + "ssm_conv1d.weight": init.mat(spec.conv_dim, spec.ssm_conv_kernel),
        block + "ssm_dt.bias": init.vec(v_heads, 0.5),
        # -exp(A_log): a negative decay rate per value head
        block + "ssm_a": -np.exp(init.vec(v_heads, 0.3, -0.5)).astype(np.float32),
        block + "ssm_beta.weight": init.mat(v_heads, d),
        block + "ssm_alpha.weight": init.mat(v_heads, d),
        block + "ssm_norm.weight": ones(spec.ssm_state_size),
        block + "ssm_out.weight": init.mat(d, spec.ssm_inner_size, out_scale),
    }


def _attention_layer(init: _Init, spec: HybridSpec, block: str, out_scale: float) -> dict[str, np.ndarray]:
    d, hd = spec.n_embd, spec.head_dim
    return {
        block + "attn_q.weight": init.mat(hd * spec.n_head * 2, d),  # query and its output gate
        block + "attn_k.weight": init.mat(hd * spec.n_head_kv, d),
        block + "attn_v.weight": init.mat(hd * spec.n_head_kv, d),
        block + "attn_output.weight": init.mat(d, hd * spec.n_head, out_scale),
        block + "attn_q_norm.weight": ones(hd),
        block + "attn_k_norm.weight": ones(hd),
    }


def write_hybrid_gguf(path: Path, spec: HybridSpec, weights: dict[str, np.ndarray], name: str,
                      nextn_layers: int = 0) -> Path:
    """`nextn_layers`: MTP blocks stored after the trunk (`blk.{n_layer}.nextn.*`); llama.cpp
    counts them in `block_count` and reads `qwen35.nextn_predict_layers`."""
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_name(name)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer + nextn_layers)
    if nextn_layers:
        writer.add_uint32("qwen35.nextn_predict_layers", nextn_layers)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_dimension_sections([2, 2, 2, 2])  # text only: all four sections see one position
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_full_attention_interval(spec.full_attention_interval)
    writer.add_ssm_conv_kernel(spec.ssm_conv_kernel)
    writer.add_ssm_inner_size(spec.ssm_inner_size)
    writer.add_ssm_state_size(spec.ssm_state_size)
    writer.add_ssm_time_step_rank(spec.ssm_time_step_rank)
    writer.add_ssm_group_count(spec.ssm_group_count)
    writer.add_vocab_size(len(spec.tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(writer, spec.tokens, spec.eos_id)
    _write(writer, weights)
    return path


def derive_hybrid_draft(weights: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    keep = tuple(f"blk.{i}." for i in range(n_layer))
    return {name: w for name, w in weights.items() if not name.startswith("blk.") or name.startswith(keep)}


def write_hybrid_pair(directory: Path, seed: int = 35, spec: HybridSpec | None = None,
                      draft_layers: int = 2) -> TinyPair:
    """A 4-layer qwen35 target and a 2-layer draft sharing its embeddings, head, first layers."""
    spec = spec or HybridSpec()
    directory.mkdir(parents=True, exist_ok=True)
    weights = hybrid_weights(spec, seed)
    target = write_hybrid_gguf(directory / "hybrid-target.gguf", spec, weights, "tiny-qwen35-target")
    draft_spec = replace(spec, n_layer=draft_layers)
    draft = write_hybrid_gguf(directory / "hybrid-draft.gguf", draft_spec,
                              derive_hybrid_draft(weights, draft_layers), "tiny-qwen35-draft")
    return TinyPair(target=target, draft=draft)


def write_mamba(directory: Path, seed: int = 7, n_layer: int = 2, n_embd: int = 32) -> Path:
    """A tiny `mamba` (v1) model: recurrent only, no rollback of its state in llama.cpp."""
    init = _Init(seed)
    d_inner, d_state, d_conv, dt_rank = 2 * n_embd, 8, 4, 4  # llama.cpp requires d_inner = 2 n_embd
    tokens = tuple(vocabulary())
    weights = {
        "token_embd.weight": init.rng.standard_normal((len(tokens), n_embd)).astype(np.float32),
        "output_norm.weight": ones(n_embd),
        "output.weight": init.mat(len(tokens), n_embd, 6.0),
    }
    for i in range(n_layer):
        block = f"blk.{i}."
        weights |= {
            block + "attn_norm.weight": ones(n_embd),
            block + "ssm_in.weight": init.mat(2 * d_inner, n_embd),
            block + "ssm_conv1d.weight": init.mat(d_inner, d_conv),
            block + "ssm_conv1d.bias": init.vec(d_inner, 0.1),
            block + "ssm_x.weight": init.mat(dt_rank + 2 * d_state, d_inner),
            block + "ssm_dt.weight": init.mat(d_inner, dt_rank),
            block + "ssm_dt.bias": init.vec(d_inner, 0.5),
            block + "ssm_a": -np.exp(init.rng.standard_normal((d_inner, d_state)) * 0.3).astype(np.float32),
            block + "ssm_d": ones(d_inner),
            block + "ssm_out.weight": init.mat(n_embd, d_inner),
        }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_name("tiny-mamba")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_head_count(0)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(writer, tokens, EOS_ID)
    _write(writer, weights)
    return path
