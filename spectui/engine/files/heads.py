"""Does this EAGLE-3 / DFlash head fit this target? Read from the two GGUF headers, before any load.

A feature-level head reads the target's hidden states, so besides the shared tokenizer
(`compat`) it needs, from llama.cpp's loader and drivers (src/models/eagle3.cpp, dflash.cpp,
common/speculative.cpp:455-1330):

- EAGLE-3: exactly three `eagle3.target_layers`, and `eagle3.target_hidden_size` equal to the
  target's width (the encoder's input is 3 x that, `n_embd_inp_enc`).
- DFlash: its own width equal to the target's (its encoder input is len(target_layers) x its own
  `n_embd`: dflash.cpp `load_arch_hparams`), at least one target layer, and a mask token
  (`tokenizer.ggml.mask_token_id`: the block is [last, MASK, MASK, ...]).
- Both: every layer id at most the target's layer count, and a target whose graph fills the taps
  (`archs.LAYER_TAP_ARCHS`; id n_layer only where `archs.FINAL_TAP_ARCHS`): otherwise llama.cpp
  aborts the process instead of failing the call.

Two DFlash variants draft as kinds of their own (`drafter`): DSpark (a Markov head, `markov_w1`:
`dspark`) and DFlash2 (a candidate selector, `dflash.selector_top_k` + `selector_*` tensors:
`dflash2`); each adds its fit checks (a DSpark head needs `dflash.block_size`, which llama.cpp's
graph asserts; a DFlash2 head its selector tensors and a width that holds the lattice). A DSpark
head's optional confidence head (`conf_proj`) is read as the draft's confidence (`dspark`).

A DeepSeek-V4 DSpark head (`dflash.hyper_connection.count` > 0, the key llama.cpp's loader reads:
src/llama-arch.cpp:307, src/models/dflash.cpp:53) has DeepSeek-V4 stages for decoder layers
(hyper-connections, MLA, a MoE each, K in a sliding-window cache: dflash.cpp:51-92, 858-1012). It
drafts like any DSpark head (the stages are llama.cpp's graph), but llama.cpp aborts the process
on a few shapes its header shows (`_stages_misfit`), so those are refused in one line first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spectui.engine.files import gguf_file
from spectui.engine.files.archs import FEATURE_HEAD_ARCHS, FINAL_TAP_ARCHS, LAYER_TAP_ARCHS
from spectui.errors import ModelLoadError

DEFAULT_BLOCK_SIZE = 16  # common/speculative.cpp:981, when `dflash.block_size` is absent
KIND_NAMES = {"eagle3": "EAGLE-3", "dflash": "DFlash", "dspark": "DSpark", "dflash2": "DFlash2"}
"""The drafter kind each head runs as, named for people."""


@dataclass(frozen=True)
class HeadFacts:
    """What an EAGLE-3 or DFlash GGUF header says about the target it reads."""

    arch: str
    n_embd: int
    target_layers: tuple[int, ...]
    target_hidden_size: int
    """The target width it was trained on (EAGLE-3's key; a DFlash head is its own width)."""
    block_size: int = DEFAULT_BLOCK_SIZE
    mask_token: int | None = None
    causal: bool = False
    """DFlash: attention inside the block is causal (`dflash.attention.causal`; default off)."""
    stages: int = 0
    """DeepSeek-V4 DSpark stages: their hyper-connection streams (0: plain DFlash layers)."""
    stages_misfit: str | None = None
    """Why llama.cpp would abort on those stages, as a clause ("has 2 hyper-connection streams ...")."""
    markov: bool = False
    """DSpark: the head carries a Markov head (`markov_w1`) that biases each block row."""
    sample_from_anchor: bool = True
    """DSpark: the anchor-first layout (`dflash.sample_from_anchor`, default true): row 0 drafts."""
    has_block_size: bool = True
    selector_top_k: int = 0
    """DFlash2: candidates per position in the selector lattice (0: no selector)."""
    has_selector: bool = False
    """DFlash2: the `selector_hidden` tensor, without which llama.cpp builds no lattice."""
    confidence_head: bool = False
    """DSpark: a confidence head (`conf_proj`), whose sigmoid per row predicts its acceptance."""

    @property
    def drafter(self) -> str:
        """The drafter kind that runs this head: eagle3, dflash, dspark or dflash2."""
        if self.arch != "dflash":
            return self.arch
        return "dspark" if self.markov else "dflash2" if self.selector_top_k > 0 or self.has_selector else "dflash"

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.drafter, FEATURE_HEAD_ARCHS.get(self.arch, self.arch))

    @property
    def max_draft(self) -> int:
        """Tokens one draft may hold: EAGLE-3 chains without a limit; DFlash fills one block
        of `block_size`, its first row being the last token (speculative.cpp:1022-1031), except
        DSpark's anchor-first layout, whose every row drafts."""
        if self.arch != "dflash":
            return 1 << 30
        return self.block_size if self.markov and self.sample_from_anchor else self.block_size - 1


@dataclass(frozen=True)
class TargetFacts:
    """What a target GGUF header says about the hidden states it can hand a head."""

    arch: str
    n_embd: int
    n_layer: int
    """Trunk layers (`block_count` less any MTP layers stored after them)."""


def _int(metadata: Mapping[str, object], key: str, default: int = 0) -> int:
    value = metadata.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ints(metadata: Mapping[str, object], key: str) -> tuple[int, ...]:
    value = metadata.get(key)
    if isinstance(value, gguf_file.ArrayInfo) and value.values is not None:
        return tuple(int(v) for v in value.values)
    return (value,) if isinstance(value, int) and not isinstance(value, bool) else ()


def _header(path: Path) -> gguf_file.GGUFHeader:
    gguf_file.check_readable(path)
    header = gguf_file.read_header(path)
    if header is None:
        raise ModelLoadError(f"{path} cannot be used: {gguf_file.diagnose(path)}")
    return header


def head_arch(path: Path) -> str | None:
    """`eagle3` or `dflash` when `path` is such a head, else None (any other GGUF)."""
    arch = gguf_file.read_metadata(path).get("general.architecture")
    return arch if arch in FEATURE_HEAD_ARCHS else None


def head_kind(path: Path) -> str | None:
    """The drafter kind that runs the head at `path` (eagle3, dflash, dspark, dflash2), else None."""
    arch = head_arch(path)
    return read_head(path).drafter if arch == "dflash" else arch


def a_head_kind(kind: str) -> str:
    """"a DSpark head", "an EAGLE-3 head"."""
    name = KIND_NAMES.get(kind, kind)
    return f"{'an' if name[:1] in 'AEIOU' else 'a'} {name} head"


def check_not_a_head(path: Path) -> None:
    """Raise `ModelLoadError` when `path`, given as the model to chat with, is a draft head (a
    missing or damaged file is left to the loader's own one-line errors)."""
    try:
        header = gguf_file.read_header(path) if path.is_file() else None
    except OSError:
        return
    arch = header.metadata.get("general.architecture") if header is not None else None
    if isinstance(arch, str) and arch in FEATURE_HEAD_ARCHS:
        from spectui.engine.files.archs import a_head

        raise ModelLoadError(f"{path.name} is {a_head(arch)}, not a model to chat with: pass it as --draft "
                             f"beside the target it was trained for (--target MODEL --draft {path.name})")


def read_head(path: Path) -> HeadFacts:
    return head_from_header(_header(path))


def head_from_header(header: gguf_file.GGUFHeader) -> HeadFacts:
    meta = header.metadata
    arch = str(meta.get("general.architecture") or "?")
    n_embd = _int(meta, f"{arch}.embedding_length")
    stages = _int(meta, f"{arch}.hyper_connection.count")
    mask = meta.get("tokenizer.ggml.mask_token_id")
    return HeadFacts(
        arch=arch, n_embd=n_embd, target_layers=_ints(meta, f"{arch}.target_layers"),
        target_hidden_size=_int(meta, f"{arch}.target_hidden_size", n_embd) if arch == "eagle3" else n_embd,
        block_size=_int(meta, f"{arch}.block_size", DEFAULT_BLOCK_SIZE),
        mask_token=mask if isinstance(mask, int) and not isinstance(mask, bool) else None,
        causal=meta.get(f"{arch}.attention.causal") is True,
        stages=stages, stages_misfit=_stages_misfit(meta, arch) if stages > 0 else None,
        markov="markov_w1.weight" in header.tensor_names,
        sample_from_anchor=meta.get(f"{arch}.sample_from_anchor", True) is True,
        has_block_size=f"{arch}.block_size" in meta or arch != "dflash",
        selector_top_k=_int(meta, f"{arch}.selector_top_k"),
        has_selector="selector_hidden.weight" in header.tensor_names,
        confidence_head="markov_w1.weight" in header.tensor_names and "conf_proj.weight" in header.tensor_names,
    )


def _stages_misfit(meta: Mapping[str, object], arch: str) -> str | None:
    """What in a DeepSeek-V4 DSpark header llama.cpp asserts on (aborting the process) rather than
    refusing in a failed load: the 4 streams build_hc_pre takes (deepseek4.cpp:366), a sliding
    window (dflash.cpp:83), output groups that divide the heads (dflash.cpp:72, deepseek4.cpp:900)
    and keys as wide as values (deepseek4.cpp:899)."""
    streams = _int(meta, f"{arch}.hyper_connection.count")
    if streams != 4:
        return f"has {streams} hyper-connection streams (dflash.hyper_connection.count), where its stages take 4"
    if _int(meta, f"{arch}.attention.sliding_window") <= 0:
        return "has no sliding window (dflash.attention.sliding_window), which its stages keep their cache in"
    groups, heads = _int(meta, f"{arch}.attention.output_group_count"), _int(meta, f"{arch}.attention.head_count")
    if groups <= 0 or heads % groups:
        return f"splits {heads} attention heads into {groups} output groups (dflash.attention.output_group_count)"
    if _int(meta, f"{arch}.attention.key_length") != _int(meta, f"{arch}.attention.value_length"):
        return "has keys and values of different widths, where its attention shares one row for both"
    return None


def read_target(path: Path) -> TargetFacts:
    return target_from_header(_header(path))


def target_from_header(header: gguf_file.GGUFHeader) -> TargetFacts:
    meta = header.metadata
    arch = str(meta.get("general.architecture") or "?")
    n_layer = _int(meta, f"{arch}.block_count") - _int(meta, f"{arch}.nextn_predict_layers")
    return TargetFacts(arch=arch, n_embd=_int(meta, f"{arch}.embedding_length"), n_layer=n_layer)


def misfit(head: HeadFacts, target: TargetFacts, head_name: str = "the head",
           target_name: str = "the target") -> str | None:
    """Why `head` cannot draft for `target`, in one line that says what to do; None if it can."""
    kind = head.kind_name
    pick = f"pick the {kind} head published for {target_name}'s model"
    if head.stages_misfit is not None:
        return (f"{head_name} is a DeepSeek-V4 {kind} head that {head.stages_misfit}, on which llama.cpp would "
                "abort; convert it again with llama.cpp's converter")
    if target.arch not in LAYER_TAP_ARCHS:
        return (f"llama.cpp cannot hand the hidden states of a {target.arch} target to a head (its graph has "
                f"no layer taps); {kind} heads run on {', '.join(sorted(LAYER_TAP_ARCHS)[:6])}, ... targets")
    if head.arch == "eagle3" and len(head.target_layers) != 3:
        return f"{head_name} lists {len(head.target_layers)} target layers; an EAGLE-3 head reads exactly 3"
    if not head.target_layers:
        return f"{head_name} lists no target layers ({head.arch}.target_layers); convert it again with llama.cpp"
    if head.target_hidden_size != target.n_embd:
        key = "eagle3.target_hidden_size" if head.arch == "eagle3" else "its width"
        return (f"{head_name} reads hidden states {head.target_hidden_size} wide ({key}), but {target_name} "
                f"writes them {target.n_embd} wide; {pick}")
    last = target.n_layer if target.arch in FINAL_TAP_ARCHS and head.arch == "dflash" else target.n_layer - 1
    beyond = [layer for layer in head.target_layers if not 0 <= layer <= last]
    if beyond:
        return (f"{head_name} reads target layer {beyond[0]}, but {target_name} has layers 0..{last} to read "
                f"({target.n_layer} layers); {pick}")
    if head.arch == "dflash" and head.mask_token is None:
        return (f"{head_name} has no mask token (tokenizer.ggml.mask_token_id), which DFlash drafts with; "
                "convert it again with llama.cpp's converter")
    if head.arch == "dflash" and head.max_draft < 1:
        return f"{head_name} has block size {head.block_size}; a DFlash block needs room for one draft token"
    return _variant_misfit(head, head_name)


def _variant_misfit(head: HeadFacts, head_name: str) -> str | None:
    """DSpark's and DFlash2's own checks (llama.cpp asserts or throws where these fail)."""
    if head.drafter == "dspark" and not head.has_block_size:
        return (f"{head_name} is a DSpark head without dflash.block_size, which its Markov head needs; "
                "convert it again with llama.cpp's converter")
    if head.drafter == "dflash2" and not (head.has_selector and head.selector_top_k > 0):
        return (f"{head_name} has half a DFlash2 selector (dflash.selector_top_k {head.selector_top_k}, "
                f"selector tensors {'present' if head.has_selector else 'absent'}); convert it again with "
                "llama.cpp's converter")
    k = head.selector_top_k
    if head.drafter == "dflash2" and head.n_embd < k * (k + 1):
        return (f"{head_name} is {head.n_embd} wide, too narrow for its {k} x {k + 1} selector lattice; "
                "convert it again with llama.cpp's converter")
    return None
