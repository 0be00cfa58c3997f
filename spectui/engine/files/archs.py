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

# Feature-level draft heads: a separate GGUF that reads the *target's* hidden states (the inputs of
# a few target layers) and drafts from them (src/models/eagle3.cpp, dflash.cpp), by arch name.
FEATURE_HEAD_ARCHS: dict[str, str] = {"eagle3": "EAGLE-3", "dflash": "DFlash"}


def a_head(arch: str) -> str:
    """"an EAGLE-3 head", "a DFlash head"."""
    name = FEATURE_HEAD_ARCHS.get(arch, arch)
    return f"{'an' if name[:1] in 'AEIOU' else 'a'} {name} head"

# Target archs whose graph fills the layer-input taps (`res->t_layer_inp[il] = ...` for every
# layer, src/models/<arch>.cpp): only these can feed an EAGLE-3 or DFlash head. A decode of any
# other arch with a tap enabled aborts on "layer input tensor is null" (src/llama-graph.cpp:1384).
LAYER_TAP_ARCHS: frozenset[str] = frozenset({
    "llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "qwen4exp", "lfm2", "gpt-oss",
    "minimax-01", "minimax-m2", "nemotron_h", "nemotron_h_moe", "mimo2", "gemma4", "bailingmoe3",
    "deepseek4", "muse-glimmer", "nanbeige", "hunyuan_vl",
})
# ...and those that also tap the output of their last layer (layer id n_layer: nemotron-h.cpp:237,
# mimo2.cpp:237, deepseek4.cpp:1328); elsewhere a head may read layers 0..n_layer-1 only.
FINAL_TAP_ARCHS: frozenset[str] = frozenset({"nemotron_h", "nemotron_h_moe", "mimo2", "deepseek4"})

Rollback = Literal["kv", "snapshots", "none"]


def is_hybrid(arch: str) -> bool:
    """Recurrent (or convolution) layers beside attention layers, e.g. `qwen35`, `lfm2`."""
    return arch in HYBRID_ARCHS


def has_recurrent_state(arch: str) -> bool:
    """A cache that cannot drop its last tokens without snapshots (pure recurrent or hybrid)."""
    return arch in RECURRENT_ARCHS or arch in HYBRID_ARCHS


def rollback_kind(arch: str, stateful: bool | None = None) -> Rollback:
    """How a rejected draft is undone: `kv` (attention only), `snapshots`, or `none` possible.

    `stateful`: what a loaded model says of itself (`llama_model_is_recurrent` or `_is_hybrid`);
    None before a load, when the arch lists above decide."""
    if not (has_recurrent_state(arch) if stateful is None else stateful):
        return "kv"
    return "snapshots" if arch in ROLLBACK_ARCHS else "none"
