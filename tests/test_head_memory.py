"""The memory plan sizes the newest heads as llama.cpp allocates them: a DSpark and a DFlash2 head
(a DFlash block with a Markov head / a selector: one attention layer's K and V per context token),
and a DeepSeek-V4 DSpark head (its stages: one K and one V head per cell, in a sliding-window cache
that llama.cpp makes full-size in spectui's head context, `swa_full` being llama_context_default_params'
default; src/llama-kv-cache-iswa.cpp). The reference is llama.cpp's own log line of the cache it
created, for the generated heads on the tiny target."""

from __future__ import annotations

import re

import pytest
import tiny_bigram
import tiny_dflash
import tiny_dspark_v4

from spectui.engine.drafters import DrafterSpec
from spectui.engine.generator import load_generator
from spectui.engine.llama import llama_log
from spectui.session import memory

N_CTX = 8192
KV_LINE = re.compile(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers")
WRITERS = {"dspark": tiny_dflash.write_dspark_head, "dflash2": tiny_dflash.write_dflash2_head,
           "dspark-v4": tiny_dspark_v4.write_dspark_v4_head}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> tiny_bigram.BigramTarget:
    return tiny_bigram.llama_target(tmp_path_factory.mktemp("head-memory"))


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_the_memory_plan_sizes_the_heads_cache_as_llama_cpp_allocates_it(target, tmp_path, kind):
    head = WRITERS[kind](tmp_path / f"{kind}.gguf", target)
    mark = llama_log.mark()
    generator = load_generator(target.path, DrafterSpec(kind.partition("-")[0], head), n_ctx=N_CTX, n_threads=1)
    try:
        assert generator.default_kind == kind.partition("-")[0]
    finally:
        generator.close()
    caches = [KV_LINE.search(line) for line in llama_log.since(mark)]
    found = [(float(m[1]), int(m[2]), int(m[3])) for m in caches if m is not None]
    # the head's context is made last: its cache with layers is the last one logged (a V4 head's
    # non-window cache, empty, comes before its window cache)
    mib, cells, layers = [entry for entry in found if entry[2] > 0][-1]
    assert layers == 1
    assert cells == N_CTX  # full-size: the window does not shrink it in spectui's head context
    footprint = memory.read_footprint(head)
    assert footprint.arch == "dflash" and footprint.n_layer == 1
    # the log prints MiB to two decimals: within 0.005 MiB of what the plan counts
    assert footprint.kv_bytes(N_CTX) / 2**20 == pytest.approx(mib, abs=0.005)
    assert footprint.extra_bytes == 3 * 64 * memory.TAP_ROWS * memory.F32  # three tapped layers, f32
