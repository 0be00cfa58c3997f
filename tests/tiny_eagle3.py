"""A tiny EAGLE-3 head (`eagle3` arch) for a tests/tiny_bigram.py target, built to guess right often.

The keys and tensors are those llama.cpp's loader reads (src/models/eagle3.cpp
`load_arch_hparams` / `load_arch_tensors`): `eagle3.target_layers` (three layer ids whose *input*
the target exposes; 0 is the token embeddings), `eagle3.target_hidden_size`, one decoder layer
whose attention reads [attn_norm(embedding) ; attn_norm_2(g)] (2 n_embd wide), `fc` from the
three concatenated target rows to the head's width, `output_norm`, and here an own `output` but
no `token_embd`: the head embeds tokens with the target's matrix, which llama.cpp reaches through
`ctx_other` (the target's context), as published heads for Llama 3.1 8B do.

At head position P llama.cpp decodes the pair (t_{P+1}, g_P), g_P = fc(target features at P), and
the output predicts t_{P+2}. The weights make that prediction the target's own bigram, twice over:

- **The token path.** One attention head of width 64 whose query, key and value read only the
  token half of the input: q = s * x, k = x, v = x with x = rmsnorm(E[t]). A token's score with
  itself is s * |x|^2 / 8 = 8 s, with another token's ~ s * N(0, 1), so with s = 2 the head attends
  to its own token (or the same token elsewhere: the same value) and hands x = sqrt(d) u_t on.
- **The feature path.** `fc` = [0 | 0 | I]: g_P is the target's input of its last layer at P, about
  |E| u_{t_P} plus the trunk's push. It enters the residual stream raw (norm_before_residual unset).
- **The output.** The head's own output matrix gives row sigma(t) and row sigma(sigma(t)) each
  `head_scale * u_t` (tests/tiny_mtp.py's `bigram_head`), so the state u_{t_{P+1}} + u_{t_P}
  favours sigma(t_{P+1}) twice when the target followed its bigram (t_{P+1} = sigma(t_P)) and
  once otherwise. Zeroed or misaligned features therefore guess clearly worse.
- **Not exact.** The FFN writes small random updates (`head_noise`) and `output_norm` is
  `head_sharpen` times the target's, so the head's q is sharper than the target's p: a rule that
  accepts without rejection sampling emits q's mode too often, and the chi-square test sees it.

Acceptance at T = 0 is the chance that the target's trunk leaves sigma(last) on top: about 0.5 to
0.8 (the tests assert it lies inside 0.2..0.95).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from tiny_bigram import BigramTarget
from tiny_hybrid import _Init, _write, add_tokenizer, ones
from tiny_mtp import bigram_head

LAST_TAP = 2  # fc reads the third target row: the input of the target's last layer


@dataclass(frozen=True)
class Eagle3Spec:
    n_ff: int = 128
    self_attention: float = 2.0
    head_scale: float = 0.6
    head_noise: float = 0.05
    head_sharpen: float = 1.4
    target_layers: tuple[int, ...] | None = None
    """None: (0, n_layer // 2, n_layer - 1)."""
    target_hidden_size: int | None = None
    """None: the target's width (a wrong one makes a head of the wrong shape)."""


def head_weights(target: BigramTarget, spec: Eagle3Spec, seed: int) -> dict[str, np.ndarray]:
    init = _Init(seed)
    d, n_vocab = target.n_embd, target.n_vocab
    n_taps = len(spec.target_layers or (0, 0, 0))
    eye, zero = np.eye(d, dtype=np.float32), np.zeros((d, d), dtype=np.float32)
    fc = np.hstack([eye if i == LAST_TAP else zero for i in range(n_taps)])
    sigma = target.sigma
    return {
        "fc.weight": fc,
        "output_norm.weight": (ones(d) * spec.head_sharpen).astype(np.float32),
        "output.weight": bigram_head(n_vocab, target.units, [sigma, sigma[sigma]], spec.head_scale, init),
        "blk.0.attn_norm.weight": ones(d),
        "blk.0.attn_norm_2.weight": ones(d),
        "blk.0.attn_q.weight": np.hstack([eye * spec.self_attention, zero]),
        "blk.0.attn_k.weight": np.hstack([eye, zero]),
        "blk.0.attn_v.weight": np.hstack([eye, zero]),
        "blk.0.attn_output.weight": eye.copy(),
        "blk.0.ffn_norm.weight": ones(d),
        "blk.0.ffn_gate.weight": init.mat(spec.n_ff, d),
        "blk.0.ffn_up.weight": init.mat(spec.n_ff, d),
        "blk.0.ffn_down.weight": init.mat(d, spec.n_ff, spec.head_noise),
    }


def write_eagle3_head(path: Path, target: BigramTarget, spec: Eagle3Spec | None = None, seed: int = 3,
                      swap_token: int = 0) -> Path:
    """An `eagle3` GGUF drafting for `target`, with `target`'s tokenizer (as llama.cpp's converter
    copies it from --target-model-dir); `swap_token`: tokens swap_token and swap_token + 1 trade
    places (a head converted for another tokenizer)."""
    spec = spec or Eagle3Spec()
    layers = spec.target_layers or (0, target.n_layer // 2, target.n_layer - 1)
    spec = Eagle3Spec(**{**spec.__dict__, "target_layers": tuple(layers)})
    d = target.n_embd
    writer = gguf.GGUFWriter(str(path), "eagle3")
    writer.add_name(path.stem)
    writer.add_context_length(4096)
    writer.add_embedding_length(d)
    writer.add_block_count(1)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(1)
    writer.add_head_count_kv(1)
    writer.add_rope_dimension_count(d)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_array("eagle3.target_layers", list(layers))
    writer.add_uint32("eagle3.target_hidden_size", spec.target_hidden_size or d)
    writer.add_vocab_size(target.n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens = list(_tokens(target))
    if swap_token:
        tokens[swap_token], tokens[swap_token + 1] = tokens[swap_token + 1], tokens[swap_token]
    add_tokenizer(writer, tuple(tokens), 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(writer, head_weights(target, spec, seed))
    return path


def _tokens(target: BigramTarget) -> tuple[str, ...]:
    from tiny_gguf import vocabulary

    tokens = tuple(vocabulary())
    assert len(tokens) == target.n_vocab
    return tokens
