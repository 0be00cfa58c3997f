"""Generate tiny, real GGUF models for the test suite.

The models are `llama`-architecture networks with random weights and a real byte-level BPE
tokenizer (llama.cpp's `gpt2` tokenizer model): 256 byte tokens, a handful of merges, and
ChatML-style control tokens, so llama.cpp loads, tokenizes, templates and decodes them exactly as
it would a downloaded model. A draft is *derived* from its target: it shares the embeddings, the
output head and the first layer, so its next-token distribution is correlated with the target's
and acceptance lands strictly between 0 and 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

SPECIAL_TOKENS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<pad>"]
BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = 0, 1, 2, 3
MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
    ("Ġ", "s"), ("r", "e"), ("Ġ", "w"), ("a", "t"), ("e", "n"), ("Ġ", "o"), ("i", "s"),
]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-character map (what llama.cpp's BPE expects)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def vocabulary() -> list[str]:
    byte_tokens = [bytes_to_unicode()[b] for b in range(256)]
    return SPECIAL_TOKENS + byte_tokens + [a + b for a, b in MERGES]


@dataclass(frozen=True)
class TinySpec:
    """Shape and tokenizer metadata of one tiny model."""

    n_layer: int = 4
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int | None = None
    """Key/value heads (grouped-query attention) when set; else one per query head."""
    n_ff: int = 128
    context_length: int = 4096
    eos_id: int = EOS_ID
    chat_template: str | None = CHATML_TEMPLATE
    tokens: tuple[str, ...] = tuple(vocabulary())
    add_bos: bool = False
    basename: str | None = None
    """`general.basename` (the family), when set."""
    mtp_layers: int = 0
    """`llama.nextn_predict_layers`: declares MTP heads (metadata only; no nextn tensors)."""
    user_defined: frozenset[str] = frozenset()
    """Tokens among `tokens` written as USER_DEFINED (added tokens, as Qwen's `<tool_call>`: one
    token in text, shown as text), the rest after the control tokens as NORMAL."""
    sampling: tuple[tuple[str, float | int], ...] = ()
    """The publisher's recommended sampling: (`temp`, 0.6), (`top_k`, 20), ... as
    `general.sampling.<name>` (top_k and other counts as int32, the rest as float32)."""


def random_weights(spec: TinySpec, seed: int, logit_scale: float = 6.0) -> dict[str, np.ndarray]:
    """Random llama weights; deeper layers write small updates so a 1-layer draft tracks them."""
    rng = np.random.default_rng(seed)
    d, ff, n_vocab = spec.n_embd, spec.n_ff, len(spec.tokens)
    kv = d // spec.n_head * (spec.n_head_kv or spec.n_head)

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    weights = {
        "token_embd.weight": rng.standard_normal((n_vocab, d)).astype(np.float32),
        "output_norm.weight": np.ones(d, dtype=np.float32),
        "output.weight": mat(n_vocab, d, logit_scale),
    }
    for i in range(spec.n_layer):
        depth_scale = 1.0 if i == 0 else 0.35
        weights |= {
            f"blk.{i}.attn_norm.weight": np.ones(d, dtype=np.float32),
            f"blk.{i}.attn_q.weight": mat(d, d),
            f"blk.{i}.attn_k.weight": mat(kv, d),
            f"blk.{i}.attn_v.weight": mat(kv, d),
            f"blk.{i}.attn_output.weight": mat(d, d, depth_scale),
            f"blk.{i}.ffn_norm.weight": np.ones(d, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": mat(ff, d),
            f"blk.{i}.ffn_up.weight": mat(ff, d),
            f"blk.{i}.ffn_down.weight": mat(d, ff, depth_scale),
        }
    return weights


def derive_draft(target_weights: dict[str, np.ndarray], n_layer: int = 1) -> dict[str, np.ndarray]:
    """The draft keeps the target's embeddings, head and first `n_layer` layers."""
    keep = {f"blk.{i}." for i in range(n_layer)}
    return {
        name: w
        for name, w in target_weights.items()
        if not name.startswith("blk.") or any(name.startswith(k) for k in keep)
    }


def write_gguf(path: Path, spec: TinySpec, weights: dict[str, np.ndarray], name: str) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    if spec.basename:
        writer.add_basename(spec.basename)
    if spec.mtp_layers:
        writer.add_uint32("llama.nextn_predict_layers", spec.mtp_layers)
    for name, value in spec.sampling:
        key = f"general.sampling.{name}"
        writer.add_int32(key, value) if isinstance(value, int) else writer.add_float32(key, value)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv or spec.n_head)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(spec.tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(list(spec.tokens))
    n_special = len(SPECIAL_TOKENS)
    writer.add_token_types(
        [gguf.TokenType.CONTROL] * n_special
        + [gguf.TokenType.USER_DEFINED if t in spec.user_defined else gguf.TokenType.NORMAL
           for t in spec.tokens[n_special:]]
    )
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(spec.eos_id)
    writer.add_add_bos_token(spec.add_bos)
    if spec.chat_template is not None:
        writer.add_chat_template(spec.chat_template)
    for tensor_name, tensor in weights.items():
        writer.add_tensor(tensor_name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclass(frozen=True)
class TinyPair:
    target: Path
    draft: Path


def write_pair(
    directory: Path, seed: int = 1234, spec: TinySpec | None = None, draft_layers: int = 1
) -> TinyPair:
    """Write a target and a correlated draft into `directory`."""
    spec = spec or TinySpec()
    directory.mkdir(parents=True, exist_ok=True)
    weights = random_weights(spec, seed)
    target = write_gguf(directory / "target.gguf", spec, weights, "tiny-target")
    draft_spec = replace(spec, n_layer=draft_layers)
    draft = write_gguf(directory / "draft.gguf", draft_spec, derive_draft(weights, draft_layers), "tiny-draft")
    return TinyPair(target=target, draft=draft)


def write_incompatible_draft(directory: Path, seed: int = 1234, swap_id: int = 100) -> Path:
    """A draft whose vocabulary differs from `write_pair`'s at token `swap_id`."""
    spec = TinySpec()
    tokens = list(spec.tokens)
    tokens[swap_id], tokens[swap_id + 1] = tokens[swap_id + 1], tokens[swap_id]
    bad = replace(spec, n_layer=1, tokens=tuple(tokens))
    directory.mkdir(parents=True, exist_ok=True)
    weights = derive_draft(random_weights(spec, seed), 1)
    return write_gguf(directory / "draft-incompatible.gguf", bad, weights, "tiny-bad-draft")


def write_model(path: Path, spec: TinySpec, seed: int = 1234, n_layer: int | None = None) -> Path:
    """One model with `write_pair`'s weights (the first `n_layer` layers), under any name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = random_weights(spec, seed)
    if n_layer is not None:
        weights, spec = derive_draft(weights, n_layer), replace(spec, n_layer=n_layer)
    return write_gguf(path, spec, weights, path.stem)


def write_mmproj(path: Path) -> Path:
    """A vision-projector-like GGUF (`clip` architecture, `general.type = mmproj`): not a language model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_type("mmproj")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_tensor("v.patch_embd.weight", np.zeros((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def extra_tokens(n: int) -> tuple[str, ...]:
    """`n` tokens to append to `vocabulary()` (plain tokens the model can generate, never parsed)."""
    return tuple(f"<|extra_{i}|>" for i in range(n))


def write_pair_with_vocabularies(directory: Path, target_extra: int, draft_extra: int,
                                 seed: int = 1234, boost: float = 1.5) -> TinyPair:
    """A pair whose vocabularies are `vocabulary()` plus a few tokens at the end, different counts.

    The larger vocabulary's extra output rows copy (times `boost`) the rows of the most common
    byte tokens, so the model that has them generates them often: the test sees what happens when
    an id exists on one side only. Everything else is `write_pair`'s (the draft shares the target's
    embeddings, head and first layer, cut to its own vocabulary)."""
    base = TinySpec()
    most = max(target_extra, draft_extra)
    spec = replace(base, tokens=base.tokens + extra_tokens(most))
    weights = random_weights(spec, seed)
    n_base = len(base.tokens)
    for i in range(most):
        source = len(SPECIAL_TOKENS) + ord("e") + i  # 'e', 'f', ...: bytes the models write often
        weights["output.weight"][n_base + i] = weights["output.weight"][source] * boost
        weights["token_embd.weight"][n_base + i] = weights["token_embd.weight"][source]
    directory.mkdir(parents=True, exist_ok=True)

    def cut(w: dict[str, np.ndarray], n_vocab: int) -> dict[str, np.ndarray]:
        return {k: (v[:n_vocab] if k in ("output.weight", "token_embd.weight") else v) for k, v in w.items()}

    target_spec = replace(spec, tokens=base.tokens + extra_tokens(target_extra))
    draft_spec = replace(spec, n_layer=1, tokens=base.tokens + extra_tokens(draft_extra))
    target = write_gguf(directory / f"target-plus{target_extra}.gguf", target_spec,
                        cut(weights, len(target_spec.tokens)), "tiny-target")
    draft = write_gguf(directory / f"draft-plus{draft_extra}.gguf", draft_spec,
                       cut(derive_draft(weights, 1), len(draft_spec.tokens)), "tiny-draft")
    return TinyPair(target=target, draft=draft)


def write_header_model(path: Path, arch: str, values: dict[str, int], swap_token: int = 0) -> Path:
    """A GGUF with `arch`, the given integer keys and the tiny test tokenizer; no tensors."""
    tokens = list(TinySpec().tokens)
    if swap_token:
        tokens[swap_token], tokens[swap_token + 1] = tokens[swap_token + 1], tokens[swap_token]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    for key, value in values.items():
        writer.add_uint32(key, value)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    n_special = len(SPECIAL_TOKENS)
    writer.add_token_types(
        [gguf.TokenType.CONTROL] * n_special + [gguf.TokenType.NORMAL] * (len(tokens) - n_special)
    )
    writer.add_token_merges([f"{a} {b}" for a, b in MERGES])
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
