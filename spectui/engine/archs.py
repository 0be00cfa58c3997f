"""Which llama.cpp architectures keep recurrent state, and which can roll it back: one place.

The names are llama.cpp's `general.architecture` strings (`LLM_ARCH_NAMES` in
`src/llama-arch.cpp`), copied from the llama.cpp vendored in llama-cpp-python 0.3.36:

- `RECURRENT_ARCHS`: `llm_arch_is_recurrent` (llama-arch.cpp:1071): recurrent layers only;
- `HYBRID_ARCHS`: `llm_arch_is_hybrid` (llama-arch.cpp:1085): recurrent or convolution layers
  beside attention layers;
- `ROLLBACK_ARCHS`: `llm_arch_supports_rs_rollback` (llama-arch.cpp:1123): a context created
  with `n_rs_seq > 0` keeps recurrent-state snapshots, so `llama_memory_seq_rm` can undo the
  last few decoded tokens; other archs clamp `n_rs_seq` to 0.

Every other architecture keeps only an attention KV cache, which rolls back freely.
"""

from __future__ import annotations

from typing import Literal

RECURRENT_ARCHS: frozenset[str] = frozenset({
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7",
})

HYBRID_ARCHS: frozenset[str] = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
    "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next",
    "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01",
})

ROLLBACK_ARCHS: frozenset[str] = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
    "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3",
})

# Archs whose MTP (nextn) layers llama.cpp can run as a draft head: each builds an
# LLM_GRAPH_TYPE_DECODER_MTP graph (`build_arch_graph` in src/models/<arch>.cpp). A GGUF of another
# arch that declares `nextn_predict_layers` has no head llama.cpp could run.
MTP_HEAD_ARCHS: frozenset[str] = frozenset({
    "qwen35", "qwen35moe", "qwen3next", "deepseek2", "deepseek32", "deepseek4", "glm4moe", "glm-dsa",
    "glm5-next", "nemotron_h_moe", "bailingmoe3", "cohere2moe", "hy_v3", "mimo2", "step35",
})

# MTP assistant drafters: a separate small GGUF that reads the target's own KV cache
# (`ctx_other`, src/llama-context.cpp:147; shared layers, src/llama-model.cpp:2809), keyed by its
# architecture, with the target architectures it can draft for.
MTP_ASSISTANT_ARCHS: dict[str, frozenset[str]] = {
    "gemma4-assistant": frozenset({"gemma4"}),
}

Rollback = Literal["kv", "snapshots", "none"]


def is_hybrid(arch: str) -> bool:
    """Recurrent (or convolution) layers beside attention layers, e.g. `qwen35`, `lfm2`."""
    return arch in HYBRID_ARCHS


def has_recurrent_state(arch: str) -> bool:
    """A cache that cannot drop its last tokens without snapshots (pure recurrent or hybrid)."""
    return arch in RECURRENT_ARCHS or arch in HYBRID_ARCHS


def rollback_kind(arch: str) -> Rollback:
    """How a rejected draft is undone: `kv` (attention only), `snapshots`, or `none` possible."""
    if not has_recurrent_state(arch):
        return "kv"
    return "snapshots" if arch in ROLLBACK_ARCHS else "none"
