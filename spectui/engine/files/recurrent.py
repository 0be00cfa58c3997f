"""What llama.cpp can undo in a recurrent or hybrid model, and what its recurrent state costs.

Light facts only (no llama.cpp import), so the memory plan and the catalog can use them before
anything is loaded. Sources: llama-cpp-python 0.3.36's vendored llama.cpp.

- `SNAPSHOT_ARCHS` (`archs.ROLLBACK_ARCHS`, llama.cpp's `llm_arch_supports_rs_rollback`): only these
  archs honour `llama_context_params.n_rs_seq`; llama.cpp clamps it to 0 for every other arch
  (src/llama-context.cpp:106).
- One recurrent state is, per recurrent layer, a conv row of `n_embd_r` and a state row of
  `n_embd_s` values, f32 (src/llama-hparams.cpp:208-257, src/llama-model.cpp:2665-2775). With
  `n_rs_seq` snapshots llama.cpp allocates `mem_size * (1 + n_rs_seq)` rows of each
  (src/llama-memory-recurrent.cpp:101), `mem_size` = max(1, n_seq_max) = 1 for spectui:

      recurrent bytes = state_bytes * (1 + n_rs_seq)
      state_bytes     = 4 * sum over recurrent layers of (n_embd_r + n_embd_s)
"""

from __future__ import annotations

from collections.abc import Callable

from spectui.engine.files import archs
from spectui.engine.files.gguf_file import as_int

RollbackKind = archs.Rollback
"""How a model's context drops its newest tokens: "kv" (attention only: any suffix), "snapshots"
(recurrent state with bounded snapshot rollback), "none" (recurrent state, no rollback)."""

SNAPSHOT_ARCHS = archs.ROLLBACK_ARCHS
RECURRENT_ARCHS = archs.RECURRENT_ARCHS

STATE_VALUE_BYTES = 4  # llama.cpp keeps recurrent states in f32 (src/llama-model.cpp:2672, 2762)

Getter = Callable[[str], object | None]
"""Reads one GGUF metadata value by full key (lists stay lists); None when absent."""


def _per_layer(value: object | None, n_layer: int, default: int) -> list[int]:
    if value is None:
        return [default] * n_layer
    if isinstance(value, list):
        return [as_int(v) for v in value[:n_layer]]
    return [as_int(value)] * n_layer


def recurrent_layers(get: Getter, arch: str, n_layer: int) -> list[bool]:
    """Which layers hold recurrent state, as each arch's `load_arch_hparams` decides."""
    flags = get(f"{arch}.attention.recurrent_layers")
    if isinstance(flags, list):
        return [bool(f) for f in flags[:n_layer]]
    if arch in RECURRENT_ARCHS:
        return [True] * n_layer
    if arch in ("qwen35", "qwen35moe", "qwen3next", "qwen4exp"):
        interval = as_int(get(f"{arch}.full_attention_interval") or 4)  # src/models/qwen35.cpp:18
        return [(i + 1) % interval != 0 for i in range(n_layer)]
    kv_heads = _per_layer(get(f"{arch}.attention.head_count_kv"), n_layer, 1)
    if arch in ("lfm2", "lfm2moe"):
        return [h == 0 for h in kv_heads]  # src/models/lfm2.cpp:12
    if arch in ("nemotron_h", "nemotron_h_moe"):
        ff = _per_layer(get(f"{arch}.feed_forward_length"), n_layer, 1)
        return [h == 0 and f == 0 for h, f in zip(kv_heads, ff, strict=False)]  # nemotron-h.cpp:15
    return [False] * n_layer


def state_bytes_per_layer(get: Getter, arch: str) -> int:
    """n_embd_r + n_embd_s of one recurrent layer, in bytes (src/llama-hparams.cpp:208-257)."""
    def key(name: str) -> int:
        return as_int(get(f"{arch}.{name}") or 0)

    n_embd = key("embedding_length")
    if key("wkv.head_size"):
        r = (key("token_shift_count") or 2) * n_embd
        s = n_embd * key("wkv.head_size")
    elif key("shortconv.l_cache"):
        r, s = n_embd * (key("shortconv.l_cache") - 1), 0
    else:
        d_conv, d_inner, d_state = key("ssm.conv_kernel"), key("ssm.inner_size"), key("ssm.state_size")
        r = max(d_conv - 1, 0) * (d_inner + 2 * key("ssm.group_count") * d_state)
        s = d_state * d_inner
    return (r + s) * STATE_VALUE_BYTES


def state_bytes(get: Getter, arch: str, n_layer: int) -> int:
    """Bytes of one recurrent state (all recurrent layers); 0 for an attention-only model."""
    n_recurrent = sum(recurrent_layers(get, arch, n_layer))
    return n_recurrent * state_bytes_per_layer(get, arch) if n_recurrent else 0


def snapshot_bytes(one_state: int, n_rs_seq: int) -> int:
    """What a context with `n_rs_seq` snapshots allocates for its recurrent state."""
    return one_state * (1 + n_rs_seq)
