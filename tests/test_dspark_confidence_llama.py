"""A DSpark head's confidence head against llama.cpp's own driver at p_min > 0, T = 0: from every
context llama-speculative-simple drafted from (--spec-type draft-dspark --spec-draft-p-min P), the
same context gets from spectui's drafter a draft of the same length with the same verdict, that is,
the confidence head stops both at the same row (speculative.cpp:1212-1220). Skipped without the
tool (scripts/build_llama_cpp.sh; SPECTUI_LLAMA_BUILD: another build). At p_min 0 the whole
protocol is compared by scripts/bench_heads.py (tests/test_scripts.py)."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
import tiny_bigram
import tiny_dflash
from head_runs import LLAMA_SPECULATIVE, PROMPTS, THREADS, StopBelow, run

from spectui.engine.drafters import DrafterSpec
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.generator import load_generator

pytestmark = pytest.mark.skipif(not LLAMA_SPECULATIVE.exists(),
                                reason="llama.cpp's tools are not built (scripts/build_llama_cpp.sh)")
PER_CYCLE = re.compile(r"accepted (\d+)/(\d+) draft tokens")  # speculative-simple.cpp's debug line
N_PREDICT = 48


def llama_cycles(target, head, prompt: str, k: int, p_min: float) -> list[tuple[int, int]]:
    """(accepted, drafted) of each cycle of llama.cpp's own greedy run, in order."""
    command = [str(LLAMA_SPECULATIVE), "-m", str(target), "-md", str(head), "-p", prompt, "-n", str(N_PREDICT),
               "-c", "1024", "-t", "1", "--temp", "0", "--spec-type", "draft-dspark", "--spec-draft-n-max", str(k),
               "--spec-draft-p-min", str(p_min), "-lv", "5"]
    done = subprocess.run(command, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [(int(a), int(d)) for a, d in PER_CYCLE.findall(done.stderr.decode("utf-8", errors="replace"))]


@pytest.mark.parametrize(("k", "p_min"), [(6, 0.5), (8, 0.2)])
def test_a_confidence_head_stops_drafts_where_llama_cpp_does(tmp_path, k, p_min):
    target = tiny_bigram.llama_target(tmp_path)
    head = tiny_dflash.write_dflash_head(tmp_path / "dspark-conf.gguf", target,
                                         tiny_dflash.DFlashSpec(markov_rank=16, confidence=True))
    gen = load_generator(target.path, DrafterSpec("dspark", head), n_ctx=1024, n_threads=THREADS)
    compared, stopped = 0, 0
    try:
        drafter = gen.drafters["dspark"]
        for prompt in PROMPTS[:3]:
            prompt_tokens = gen.target.tokenize(prompt)
            reply = [*prompt_tokens, *run(gen, prompt, 0, max_tokens=N_PREDICT + 16).tokens]
            position = len(prompt_tokens) - 1  # llama.cpp's first cycle drafts after the prompt's last token
            for accepted, drafted in llama_cycles(target.path, head, prompt, k, p_min):
                if position + 1 - len(prompt_tokens) + k + 1 > N_PREDICT:
                    break  # from here llama.cpp cuts its drafts to what -n has left
                context = reply[: position + 1]
                gen.reset()
                gen.target.sync(context[:-1])
                drafter.prefill(context[:-1])
                proposal = drafter.propose(context, StopBelow(k, p_min), SamplingConfig(temperature=0.0),
                                           np.random.default_rng(0))
                following = reply[position + 1 : position + 1 + len(proposal.tokens)]
                same = next((i for i, (a, b) in enumerate(zip(proposal.tokens, following, strict=True)) if a != b),
                            len(following))
                assert (len(proposal.tokens), same) == (drafted, accepted), (prompt, position)
                compared += 1
                stopped += 0 < drafted < k
                position += accepted + 1
    finally:
        gen.close()
    assert compared >= 40 and stopped >= 3, (compared, stopped)
