"""Before loading: will both models fit, and is the draft small enough to pay off?

Weights are estimated from the file sizes (all parts of a split GGUF), the KV cache from the
GGUF header (attention layers × KV heads × head size × n_ctx, f16 keys and values). Recurrent
and hybrid models add their recurrent state (f32), times 1 + n_rs_seq where the target keeps
rollback snapshots (`spectui.engine.files.recurrent`). An EAGLE-3 / DFlash / DSpark / DFlash2 head adds,
besides its own weights and one-layer KV cache, the target's tapped layer inputs it reads (n_batch
rows of each tapped layer, f32, in the target's output buffer). A DeepSeek-V4 DSpark head's stages
keep one K and one V head per cell in a sliding-window cache, which llama.cpp makes full-size in
spectui's head context (`swa_full`, llama_context_default_params' default): per context token like
any head's (tests/test_head_memory.py holds this against llama.cpp's own log). Free RAM comes from
/proc/meminfo (`MemAvailable`), free VRAM from llama.cpp's own device registry (every GPU it
would spread layers over: CUDA, Metal, Vulkan, ROCm), else from `nvidia-smi`. When the weights
would not fit in free VRAM, fewer target layers are offloaded instead of letting the load fail;
everything else is a warning, never a refusal. A GPU the build cannot use is the first warning,
with the command that rebuilds llama-cpp-python for it (`spectui.session.doctor`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from spectui.catalog import checks
from spectui.engine.files import recurrent
from spectui.engine.files.archs import FEATURE_HEAD_ARCHS, MTP_ASSISTANT_ARCHS
from spectui.limits import MAX_DRAFT

if TYPE_CHECKING:
    from spectui.engine.drafters import DrafterSpec

KV_BYTES_PER_VALUE = 2  # llama.cpp's default f16 K and V cache
OVERHEAD = 1.10  # compute buffers and scratch, roughly
TAP_ROWS = 512  # the target's n_batch (LlamaModel.load's default): rows of each tapped layer kept
F32 = 4
SPLIT_PART = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})\.gguf$")
GB = 1e9


@dataclass(frozen=True)
class Footprint:
    """What one model needs: weights on disk, and KV cache bytes per context token."""

    name: str
    weights_bytes: int
    n_layer: int
    kv_bytes_per_token: int
    state_bytes: int = 0
    """One recurrent state (all recurrent layers, f32); 0 for an attention-only model."""
    rs_snapshots: int = 0
    """Rollback snapshots its context keeps (llama.cpp's n_rs_seq), each one more state."""
    arch: str = ""
    """llama.cpp's architecture (an MTP assistant sidecar or an EAGLE-3 / DFlash head is sized
    like the heads it is, not like a draft model)."""
    extra_bytes: int = 0
    """Buffers beside weights and caches: for a head, the target's tapped rows it reads."""

    def kv_bytes(self, n_ctx: int) -> int:
        return self.kv_bytes_per_token * n_ctx

    def recurrent_bytes(self) -> int:
        return recurrent.snapshot_bytes(self.state_bytes, self.rs_snapshots)

    def total(self, n_ctx: int) -> int:
        return self.weights_bytes + self.kv_bytes(n_ctx) + self.recurrent_bytes() + self.extra_bytes


@dataclass
class MemoryPlan:
    warnings: list[str] = field(default_factory=list)
    n_gpu_layers: int | None = None
    draft_n_gpu_layers: int | None = None
    gpu_header: str = ""
    """For the panel's header: a GPU this machine has and the build cannot use (empty: none)."""

    def apply(self, drafter: DrafterSpec) -> DrafterSpec:
        """The drafter spec with the draft offload this plan settled on."""
        from dataclasses import replace

        return replace(drafter, draft_n_gpu_layers=self.draft_n_gpu_layers)


def weights_bytes(path: Path) -> int:
    """File size, summed over every part of a split GGUF that sits beside it."""
    match = SPLIT_PART.match(path.name)
    if match is None:
        return path.stat().st_size
    total = int(match["total"])
    parts = [path.with_name(f"{match['stem']}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]
    return sum(p.stat().st_size for p in parts if p.exists())


def read_footprint(path: Path) -> Footprint:
    """Weights, KV-cache and recurrent-state size of one GGUF, from its header (no weights are
    read). A snapshot arch is counted as a speculative target: MAX_DRAFT snapshots."""
    from spectui.engine.files.gguf_file import ArrayInfo, as_int, read_header

    header = read_header(path)
    if header is None:
        raise ValueError(f"{path.name}: unreadable GGUF header")

    def raw(key: str) -> object | None:
        """A value as llama.cpp reads it: a number, a string, or a short array as a list."""
        value = header.metadata.get(key)
        if isinstance(value, ArrayInfo):
            return list(value.values) if value.values is not None else None
        return value

    def number(key: str) -> int | None:
        value = raw(key)
        return int(max(value)) if isinstance(value, list) and value else (as_int(value) if value else None)

    arch = str(raw("general.architecture") or "llama")
    n_layer = number(f"{arch}.block_count") or 0
    n_recurrent = sum(recurrent.recurrent_layers(raw, arch, n_layer))
    n_embd = number(f"{arch}.embedding_length") or 0
    n_head = number(f"{arch}.attention.head_count") or 1
    n_head_kv = number(f"{arch}.attention.head_count_kv") or n_head
    head_k = number(f"{arch}.attention.key_length") or n_embd // max(n_head, 1)
    head_v = number(f"{arch}.attention.value_length") or head_k
    per_token = (n_layer - n_recurrent) * n_head_kv * (head_k + head_v) * KV_BYTES_PER_VALUE
    state = recurrent.state_bytes(raw, arch, n_layer)
    snapshots = MAX_DRAFT if state and arch in recurrent.SNAPSHOT_ARCHS else 0
    taps = 0
    if arch in FEATURE_HEAD_ARCHS:
        layers = raw(f"{arch}.target_layers")
        width = number(f"{arch}.target_hidden_size") or n_embd
        taps = (len(layers) if isinstance(layers, list) else 0) * width * TAP_ROWS * F32
    from spectui.catalog.local.origin import display_name  # an Ollama blob by its Ollama name

    return Footprint(display_name(path), weights_bytes(path), n_layer, per_token, state, snapshots, arch, taps)


def mem_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """`MemAvailable` in bytes, or None where /proc/meminfo does not exist or lacks it."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    match = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(match[1]) * 1024 if match else None


def free_vram_bytes() -> int | None:
    """Free memory of the first NVIDIA GPU, or None when `nvidia-smi` is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout
        return int(out.split()[0]) * 1024 * 1024
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def draft_size_warning(target: Footprint, draft: Footprint) -> str | None:
    """Speculation pays only when a draft pass is much cheaper than a target pass."""
    return checks.draft_size_warning(draft.name, target.weights_bytes, draft.weights_bytes)


def ram_warning(models: list[Footprint], n_ctx: int, available: int | None) -> str | None:
    if available is None:
        return None
    weights = sum(m.weights_bytes for m in models)
    kv = sum(m.kv_bytes(n_ctx) + m.recurrent_bytes() + m.extra_bytes for m in models)
    needed = int((weights + kv) * OVERHEAD)
    if needed <= available:
        return None
    return (
        f"the models need about {needed / GB:.1f} GB (weights {weights / GB:.1f} GB + KV cache "
        f"{kv / GB:.1f} GB at {n_ctx} tokens) but only {available / GB:.1f} GB of RAM is free; "
        "expect swapping or a failed load: try a smaller --ctx or a smaller pair"
    )


def layers_that_fit(target: Footprint, draft: Footprint | None, n_ctx: int, vram: int) -> int:
    """Target layers to offload so target + draft fit in `vram` (the draft goes first)."""
    budget = vram / OVERHEAD - (draft.total(n_ctx) if draft else 0)
    per_layer = target.total(n_ctx) / max(target.n_layer, 1)
    return max(0, min(target.n_layer, int(budget // per_layer)))


def plan(target: Footprint, draft: Footprint | None, n_ctx: int, *, gpu: bool,
         n_gpu_layers: int | None, draft_n_gpu_layers: int | None,
         ram: int | None, vram: int | None) -> MemoryPlan:
    """Warnings to show, and the GPU layers to use (fewer than asked when VRAM is short)."""
    result = MemoryPlan(n_gpu_layers=n_gpu_layers, draft_n_gpu_layers=draft_n_gpu_layers)
    if draft:
        draft = replace(draft, rs_snapshots=0)  # a draft goes back by checkpoints, not snapshots
    models = [target, draft] if draft else [target]
    heads = MTP_ASSISTANT_ARCHS.keys() | FEATURE_HEAD_ARCHS.keys()
    if draft and draft.arch not in heads and (warning := draft_size_warning(target, draft)):
        result.warnings.append(warning)
    offloading = gpu and n_gpu_layers != 0
    if not offloading:
        if warning := ram_warning(models, n_ctx, ram):
            result.warnings.append(warning)
        return result
    needed = sum(m.total(n_ctx) for m in models) * OVERHEAD
    if vram is None or needed <= vram:
        return result
    fit = layers_that_fit(target, draft, n_ctx, vram)
    wanted = target.n_layer if n_gpu_layers in (None, -1) else n_gpu_layers
    if fit < wanted:
        result.n_gpu_layers = fit
        result.warnings.append(
            f"{needed / GB:.1f} GB needed but {vram / GB:.1f} GB of VRAM is free: offloading "
            f"{fit} of {target.n_layer} target layers (the rest run on the CPU, slower)"
        )
    return result


def plan_run(target: Path, drafter: DrafterSpec, n_ctx: int, n_gpu_layers: int | None) -> MemoryPlan:
    """The plan for a chat or bench run: the files' headers, this machine's free RAM and VRAM.

    Raises `ModelLoadError` for a file that is missing or not a GGUF (one line, before loading).
    """
    from spectui.engine.files.gguf_file import check_readable
    from spectui.engine.llama.build_info import read_build_info
    from spectui.session.doctor import this_machine

    for path in filter(None, (target, drafter.draft)):
        check_readable(path)
    machine = this_machine()
    unused = [machine.advice] if machine.advice else []
    try:
        target_fp = read_footprint(target)
        draft_fp = read_footprint(drafter.draft) if drafter.draft else None
    except Exception:  # a damaged header: llama.cpp's load will say what is wrong
        return MemoryPlan(unused, n_gpu_layers, drafter.draft_n_gpu_layers, machine.header())
    build = read_build_info()  # free memory now
    vram = (sum(d.free_bytes for d in build.gpus) or free_vram_bytes()) if build.gpu_offload else None
    result = plan(target_fp, draft_fp, n_ctx, gpu=build.gpu_offload, n_gpu_layers=n_gpu_layers,
                  draft_n_gpu_layers=drafter.draft_n_gpu_layers, ram=mem_available_bytes(), vram=vram)
    return replace(result, warnings=[*unused, *result.warnings], gpu_header=machine.header())
