"""Write a target shaped like a 7B model and a small draft derived from it, with RANDOM weights.

    python scripts/gpu_pair.py DIR [--shape qwen25-7b|small] [--seed 1]

For scripts/gpu_check.sh's benchmarks on a GPU machine, where nothing can be fetched: the costs
of a real 7B verify pass (its matrices, F16, on the device), not its text. `qwen25-7b` has
Qwen2.5-7B's shape on llama.cpp's `llama` architecture: hidden 3584, FFN 18944, 28 layers, 28
query heads over 4 KV heads (head size 128), a 152,064-token vocabulary, untied output: 7.6B
parameters, 15.2 GB. `small` is the same recipe at width 256, 8 layers and 32k tokens (the CPU check).

The draft is the target's token embeddings, output head and first layer (a 1-layer model of the
same width: per token about 11 % of the target's weights read, the output head being most of it),
and the target's later layers write small updates into the residual stream (x 0.35 / sqrt(layers
/ 3), as tests/tiny_gguf.py's 4-layer models do at x 0.35), so the draft's next token is often
the target's and acceptance lands between 0 and 1. Acceptance on random weights says nothing
about real models: this pair measures costs (tokens/s at a given acceptance, host ms per cycle
against the verify pass, memory), and spectui and llama.cpp run on the same files.

To write 15 GB in seconds, three random layers are drawn and reused in turn (the costs do not
depend on the values). The tokenizer is the test suite's byte-level BPE plus plain extra tokens
up to the vocabulary size, with a ChatML template (tests/tiny_gguf.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_vocab: int


SHAPES = {
    "qwen25-7b": Shape(n_embd=3584, n_ff=18944, n_layer=28, n_head=28, n_head_kv=4, n_vocab=152064),
    "small": Shape(n_embd=256, n_ff=1024, n_layer=8, n_head=4, n_head_kv=2, n_vocab=32000),
}
TEMPLATES = 3
"""Distinct random layers, reused in turn."""


def weights(shape: Shape, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, ff, head = shape.n_embd, shape.n_ff, shape.n_embd // shape.n_head
    kv = head * shape.n_head_kv
    depth_scale = 0.35 / np.sqrt(max(shape.n_layer - 1, 1) / 3)

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        out = rng.standard_normal((rows, cols), dtype=np.float32)
        out *= scale / np.sqrt(cols)
        return out.astype(np.float16)

    ones = np.ones(d, dtype=np.float32)
    out: dict[str, np.ndarray] = {
        "token_embd.weight": rng.standard_normal((shape.n_vocab, d), dtype=np.float32).astype(np.float16),
        "output_norm.weight": ones,
        "output.weight": mat(shape.n_vocab, d, 6.0),
    }
    layers = []
    for i in range(min(TEMPLATES, shape.n_layer)):
        scale = 1.0 if i == 0 else depth_scale
        layers.append({"attn_q": mat(d, d), "attn_k": mat(kv, d), "attn_v": mat(kv, d),
                       "attn_output": mat(d, d, scale), "ffn_gate": mat(ff, d), "ffn_up": mat(ff, d),
                       "ffn_down": mat(d, ff, scale)})
    for i in range(shape.n_layer):
        template = layers[0] if i == 0 else layers[1 + (i - 1) % (len(layers) - 1)] if len(layers) > 1 else layers[0]
        out[f"blk.{i}.attn_norm.weight"] = ones
        out[f"blk.{i}.ffn_norm.weight"] = ones
        for name, w in template.items():
            out[f"blk.{i}.{name}.weight"] = w
    return out


def write(path: Path, shape: Shape, tensors: dict[str, np.ndarray], name: str) -> Path:
    import gguf
    import tiny_gguf

    base = tiny_gguf.vocabulary()
    tokens = base + list(tiny_gguf.extra_tokens(shape.n_vocab - len(base)))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(8192)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(shape.n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    n_special = len(tiny_gguf.SPECIAL_TOKENS)
    writer.add_token_types([gguf.TokenType.CONTROL] * n_special + [gguf.TokenType.NORMAL] * (len(tokens) - n_special))
    writer.add_token_merges([f"{a} {b}" for a, b in tiny_gguf.MERGES])
    writer.add_bos_token_id(tiny_gguf.BOS_ID)
    writer.add_eos_token_id(tiny_gguf.IM_END_ID)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tiny_gguf.CHATML_TEMPLATE)
    for tensor_name, tensor in tensors.items():
        writer.add_tensor(tensor_name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen25-7b")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    folder: Path = args.directory
    folder.mkdir(parents=True, exist_ok=True)
    target, draft = folder / f"target-{args.shape}-random-f16.gguf", folder / f"draft-{args.shape}-random-f16.gguf"
    start = time.perf_counter()
    if not (target.exists() and draft.exists()):
        tensors = weights(shape, args.seed)
        write(target, shape, tensors, f"{args.shape}-shaped target (random weights)")
        draft_shape = Shape(shape.n_embd, shape.n_ff, 1, shape.n_head, shape.n_head_kv, shape.n_vocab)
        kept = {k: v for k, v in tensors.items() if not k.startswith("blk.") or k.startswith("blk.0.")}
        write(draft, draft_shape, kept, f"{args.shape}-shaped draft: the target's first layer (random weights)")
    facts = {"shape": args.shape, **shape.__dict__, "weights": "random (not a trained model)",
             "target": str(target), "target_bytes": target.stat().st_size,
             "draft": str(draft), "draft_bytes": draft.stat().st_size,
             "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
