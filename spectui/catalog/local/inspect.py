"""What a GGUF header says about a model: `ModelInfo`, and whether it is a language model at all.

Vision projectors (`mmproj`), LoRA/control adapters, embedding models and vocabulary-only files
are GGUFs too; they are told apart by their metadata (`general.type`, `clip.*`, `adapter.*`,
`<arch>.pooling_type`), as llama.cpp itself does (`src/llama-adapter.cpp` requires
`general.type = adapter`; `clip` is the projector's architecture).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from spectui.engine.files.archs import FEATURE_HEAD_ARCHS
from spectui.engine.files.gguf_file import ArrayInfo, GGUFHeader
from spectui.engine.files.heads import HeadFacts, TargetFacts, head_from_header

Kind = Literal["model", "head", "projector", "adapter", "embedding", "vocabulary", "unknown"]
ENCODER_ARCHS = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
                           "neo-bert", "modern-bert", "t5encoder"})
QUANT_IN_NAME = re.compile(r"(?i)(?:^|[-_.])((?:UD-)?(?:I?Q\d(?:_[0-9A-Z]+)*|BF16|F16|F32|MXFP4))(?:[-_.]|$)")


class ModelInfo(BaseModel):
    """The facts `spectui list --local` shows, read once from a GGUF header and cached."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind
    """`model` for a text generator, `head` for an EAGLE-3 / DFlash draft head (it drafts for a
    target beside it); otherwise what else the file is (it is then skipped)."""

    arch: str
    """`general.architecture`, e.g. `qwen2`, `llama`, `gemma3`."""

    name: str | None = None
    """`general.name`."""

    basename: str | None = None
    """`general.basename`, the family without size or fine-tune (e.g. `Qwen2.5`)."""

    size_label: str | None = None
    """`general.size_label`, e.g. `7B`."""

    parameters: int = 0
    """Elements of every tensor in this file (for a split model, of this part only)."""

    quantization: str = "unknown"
    """`general.file_type` by name (`Q4_K_M`, `F16`...), else guessed from the file name."""

    context_length: int | None = None
    """`<arch>.context_length`: the context the model was trained for."""

    mtp_layers: int = 0
    """`<arch>.nextn_predict_layers`: multi-token-prediction heads carried in the file."""

    n_vocab: int = 0
    """Length of `tokenizer.ggml.tokens` (0 when the file has no tokenizer)."""

    split_count: int = 1
    """`split.count`: parts of a split model (1 when not split)."""

    split_no: int = 0
    """`split.no`: which part this file is, from 0."""

    n_embd: int = 0
    """`<arch>.embedding_length`: the width of its hidden states."""

    n_layer: int = 0
    """Trunk layers (`<arch>.block_count` less its MTP layers)."""

    head: HeadFacts | None = None
    """For an EAGLE-3 / DFlash head: the target layers and width it reads, and its block."""

    @property
    def drafter(self) -> str:
        """The drafter kind this file drafts as: a head's (eagle3, dflash, dspark, dflash2), else `model`."""
        return self.head.drafter if self.head is not None else "model"

    def target_facts(self) -> TargetFacts:
        return TargetFacts(self.arch, self.n_embd, self.n_layer)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def quantization_name(file_type: int | None, filename: str) -> str:
    """`Q4_K_M` for `general.file_type` 15; a guess from the file name when the key is absent."""
    if file_type is not None:
        from gguf import LlamaFileType

        try:
            return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            return f"type {file_type}"
    match = QUANT_IN_NAME.search(filename.removesuffix(".gguf"))
    return match[1].upper() if match else "unknown"


def classify(meta: Mapping[str, object], arch: str, n_tensors: int, split_count: int) -> Kind:
    general_type = _str(meta.get("general.type"))
    if general_type == "mmproj" or arch == "clip" or any(k.startswith("clip.") for k in meta):
        return "projector"
    if general_type == "adapter" or any(k.startswith("adapter.") for k in meta):
        return "adapter"
    pooling = _int(meta.get(f"{arch}.pooling_type"))
    if arch in ENCODER_ARCHS or (pooling or 0) > 0:
        return "embedding"
    if not isinstance(meta.get("tokenizer.ggml.tokens"), ArrayInfo):
        return "unknown"
    if n_tensors == 0 and split_count == 1:
        return "vocabulary"
    return "head" if arch in FEATURE_HEAD_ARCHS else "model"


def info_from_header(header: GGUFHeader, filename: str) -> ModelInfo:
    meta = header.metadata
    arch = _str(meta.get("general.architecture")) or "unknown"
    tokens = meta.get("tokenizer.ggml.tokens")
    split_count = _int(meta.get("split.count")) or 1
    kind = classify(meta, arch, header.n_tensors, split_count)
    mtp_layers = _int(meta.get(f"{arch}.nextn_predict_layers")) or 0
    return ModelInfo(
        kind=kind,
        arch=arch,
        name=_str(meta.get("general.name")),
        basename=_str(meta.get("general.basename")),
        size_label=_str(meta.get("general.size_label")),
        parameters=header.n_elements,
        quantization=quantization_name(_int(meta.get("general.file_type")), filename),
        context_length=_int(meta.get(f"{arch}.context_length")),
        mtp_layers=mtp_layers,
        n_vocab=tokens.count if isinstance(tokens, ArrayInfo) else 0,
        split_count=split_count,
        split_no=_int(meta.get("split.no")) or 0,
        n_embd=_int(meta.get(f"{arch}.embedding_length")) or 0,
        n_layer=max((_int(meta.get(f"{arch}.block_count")) or 0) - mtp_layers, 0),
        head=head_from_header(header) if kind == "head" else None,
    )


SKIP_REASONS: dict[Kind, str] = {
    "projector": "a vision/audio projector (mmproj), not a language model",
    "adapter": "a LoRA/control adapter, not a language model",
    "embedding": "an embedding model, not a text generator",
    "vocabulary": "a vocabulary-only file (no weights)",
    "unknown": "no tokenizer in its header, so not a language model llama.cpp can chat with",
}


def skip_reason(info: ModelInfo) -> str | None:
    """Why this file is not offered as a model, or None for a language model."""
    return SKIP_REASONS.get(info.kind)
