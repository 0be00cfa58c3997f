"""Speculation on hybrid (recurrent + attention) and recurrent models, on real llama.cpp with tiny
generated `qwen35` and `mamba` models: greedy equivalence, losslessness, the state after
rollbacks and deep rewinds, and the models that cannot roll back at all."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import llama_cpp
import lossless
import numpy as np
import pytest
import tiny_hybrid
from numerics import GreedyReference, assert_same_evaluation
from tiny_gguf import TinyPair

from spectui.engine.events import Finished, Progress
from spectui.engine.files import recurrent
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator, load_generator
from spectui.engine.llama import llama_log
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import FixedBudget
from spectui.engine.step.speculative import speculative_step
from spectui.errors import UnsupportedModelError
from spectui.session import memory

# One thread: these tiny models decode in about a millisecond, far less than threads take to
# synchronise on a busy machine (the same tests ran 20x slower with two threads on two shared cores).
THREADS = 1
PROMPTS = ["The story of the wind", "in the in the in the", "x", "Once upon a time"]
EOS_PROMPT = "The story of the wind"
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def hybrid_pair(tmp_path_factory: pytest.TempPathFactory) -> TinyPair:
    return tiny_hybrid.write_hybrid_pair(tmp_path_factory.mktemp("hybrid"))


@pytest.fixture(scope="module")
def mamba(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_hybrid.write_mamba(tmp_path_factory.mktemp("mamba"))


@pytest.fixture(scope="module")
def generator(hybrid_pair) -> Generator:
    gen = load_generator(hybrid_pair.target, hybrid_pair.draft, n_ctx=1024, n_threads=THREADS)
    yield gen
    gen.close()


def run(gen: Generator, prompt: str | list[int], k, max_tokens: int = 48, **sampling) -> tuple[Finished, list]:
    tokens = gen.target.tokenize(prompt) if isinstance(prompt, str) else prompt
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig(**sampling))
    events = list(gen.generate(tokens, config, DraftControl(k)))
    assert isinstance(events[-1], Finished)
    return events[-1], events


def fresh_logits(path: Path, tokens: list[int], **load) -> np.ndarray:
    with LlamaModel.load(path, n_ctx=1024, n_threads=THREADS, **load) as model:
        return model.sync(tokens).copy()


def assert_same_logits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal up to rounding across batch shapes (the delta-net kernels also sum in another order
    when the same tokens arrive in other batch sizes): see tests/numerics.py for the bound."""
    assert_same_evaluation(actual, expected)


def greedy_reply(model: LlamaModel, prompt: list[int], n: int) -> list[int]:
    reply: list[int] = []
    for _ in range(n):
        reply.append(int(model.sync(prompt + reply).argmax()))
    return reply


# ----- what llama.cpp offers, and what the models report ---------------------------------------


def test_the_pair_keeps_snapshots_on_the_target_and_none_on_the_draft(generator):
    target, draft = generator.target, generator.drafters["model"].model
    assert (target.arch, target.rollback, target.rollback_depth) == ("qwen35", "snapshots", 16)
    assert llama_cpp.llama_n_rs_seq(target._ctx) == 16
    assert (draft.rollback, draft.rollback_depth, draft.max_undo) == ("snapshots", 0, 0)
    assert target.max_undo == 16 and target.can_roll_back and generator.speculation_off is None


def test_llama_cpp_accepts_a_rollback_across_decodes_and_returns_a_stale_state(hybrid_pair):
    """Why spectui guards snapshot rollbacks itself: llama.cpp says yes to undoing the whole last
    decode (and more), then computes from a stale state. `truncate` in the same spot is exact."""
    with LlamaModel.load(hybrid_pair.target, n_ctx=256, n_threads=THREADS) as model:
        tokens = model.tokenize("The story of the wind and the rain")
        expected = fresh_logits(hybrid_pair.target, tokens[:6])
        model.sync(tokens[:4])  # decodes tokens[:3], then tokens[3] alone
        model.extend(tokens[4:6])  # the last decode: 2 tokens
        assert llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(model._ctx), 0, 4, -1)  # undo 2 of 2
        model.cached[4:] = []
        stale = model.extend(tokens[4:6])[-1].copy()
        assert np.abs(stale - expected).max() > 1e-2, "llama.cpp restored the right state after all"
        model.extend(tokens[6:8])
        model.truncate(6)  # 2 of the last decode's 2 tokens: beyond snapshots, so a checkpoint
        assert model.rewind_counts.get("checkpoint") or model.rewind_counts.get("reread")
        model.truncate(4)
        assert_same_logits(model.extend(tokens[4:6])[-1], expected)


def test_snapshot_rollback_within_the_last_decode_is_exact_and_single_use(hybrid_pair):
    with LlamaModel.load(hybrid_pair.target, n_ctx=256, rollback_depth=4, n_threads=THREADS) as model:
        tokens = model.tokenize("Hello there, what is in the box")
        model.sync(tokens[:3])
        model.extend(tokens[3:9], n_logits=6)  # like a verify pass: 6 rows
        model.truncate(6)  # undo 3 of 6: snapshots
        assert model.rewind_counts == {"snapshot": 1}
        model.truncate(5)  # a second rollback while one is pending: not by snapshot
        assert model.rewind_counts["checkpoint"] == 1
        assert_same_logits(model.extend(tokens[5:7])[-1], fresh_logits(hybrid_pair.target, tokens[:7]))
        model.extend(tokens[7:9] + tokens[:4], n_logits=6)
        model.truncate(len(model.cached) - 5)  # 5 > rollback_depth 4: not by snapshot either
        assert model.rewind_counts["snapshot"] == 1
        assert model.cached == tokens[:8]


# ----- greedy equivalence -----------------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculation_equals_target_greedy_for_every_k(generator, prompt):
    baseline = GreedyReference(generator.target, generator.target.tokenize(prompt),
                               lambda: run(generator, prompt, 0)[0], label=repr(prompt))
    assert len(baseline.tokens) >= 8
    for k in [1, 2, 3, 4, 5, 6, 7, 8, AUTO]:
        spec = baseline.check(lambda k=k: run(generator, prompt, k)[0], label=f"K={k}")  # or a GPU's near-tie
        if k != AUTO:
            assert 0 < spec.stats.acceptance_rate < 1
    # The target undid rejected drafts with snapshots only; the draft went back by checkpoints.
    assert generator.target.rewind_counts["snapshot"] > 0
    assert generator.drafters["model"].model.rewind_counts["checkpoint"] > 0


def test_greedy_acceptance_of_the_tiny_pair_is_informative(generator):
    """A pair whose drafts are always rejected (or always accepted) would prove nothing."""
    drafted = accepted = 0
    for prompt in PROMPTS:
        final, _ = run(generator, prompt, 1, max_tokens=64)
        drafted += final.stats.drafted
        accepted += final.stats.accepted
    acceptance = accepted / drafted
    assert drafted >= 60
    assert 0.2 < acceptance < 0.9, f"per-token greedy acceptance {acceptance:.2f}"


@pytest.fixture(scope="module")
def hybrid_eos_pair(hybrid_pair, tmp_path_factory: pytest.TempPathFactory) -> TinyPair:
    """`hybrid_pair`'s weights, but EOS is a token the greedy reply to EOS_PROMPT first produces
    at position 6 or later (as conftest's `eos_pair`)."""
    with LlamaModel.load(hybrid_pair.target, n_ctx=256, n_threads=THREADS) as target:
        reply = greedy_reply(target, target.tokenize(EOS_PROMPT), 32)
    eos = next(t for i, t in enumerate(reply) if i >= 6 and t not in reply[:i])
    spec = tiny_hybrid.HybridSpec(eos_id=eos)
    return tiny_hybrid.write_hybrid_pair(tmp_path_factory.mktemp("hybrid-eos"), spec=spec)


def test_eos_inside_an_accepted_draft_ends_the_reply_identically(hybrid_eos_pair):
    gen = load_generator(hybrid_eos_pair.target, hybrid_eos_pair.draft, n_ctx=512, n_threads=THREADS)
    try:
        baseline, _ = run(gen, EOS_PROMPT, 0, max_tokens=64)
        assert baseline.reason == "eos" and 6 <= len(baseline.tokens) < 64
        ended_mid_draft = 0
        for k in range(1, 9):
            spec, events = run(gen, EOS_PROMPT, k, max_tokens=64)
            assert spec.reason == "eos" and spec.tokens == baseline.tokens
            last_cycle = [e for e in events if isinstance(e, Progress)][-1].cycle
            ended_mid_draft += last_cycle.emitted < last_cycle.accepted
        assert ended_mid_draft > 0
    finally:
        gen.close()


# ----- the state after rollbacks -----------------------------------------------------------------


def test_target_and_draft_states_after_rejections_equal_fresh_evaluations(generator, hybrid_pair):
    target, proposer = generator.target, generator.drafter()
    context = target.tokenize(PROMPTS[1])
    target.sync(context[:-1])
    proposer.prefill(context[:-1])
    rng = np.random.default_rng(0)
    rejections = 0
    for _ in range(12):
        step = speculative_step(target, proposer, context, FixedBudget(8), GREEDY, rng)
        rejections += step.accepted < step.drafted
        context += step.tokens
    assert rejections > 0
    assert target.cached == context[:-1]
    after_rollback = target.extend(context[-1:]).copy()
    assert_same_logits(after_rollback[0], fresh_logits(hybrid_pair.target, context))
    draft_logits = proposer.model.catch_up(context).copy()
    assert proposer.model.cached == context
    assert_same_logits(draft_logits, fresh_logits(hybrid_pair.draft, context, rollback_depth=0))


def test_deep_rewinds_equal_fresh_evaluations(hybrid_pair):
    with LlamaModel.load(hybrid_pair.target, n_ctx=512, n_threads=THREADS) as model:
        turn1 = model.tokenize("Once upon a time")
        reply = greedy_reply(model, turn1, 12)
        turn2 = turn1 + reply + model.tokenize(" and then the wind")
        model.sync(turn2)
        model.extend(greedy_reply(model, turn2, 6)[:5])
        # An edit inside the first reply: back to a checkpoint at or before it, then a new text.
        edited = turn1 + reply[:4] + model.tokenize(" in the")
        restored = model.kept_on_sync(edited)
        assert len(turn1) - 1 <= restored <= len(turn1) + 4
        checkpoints = model.rewind_counts.get("checkpoint", 0)
        assert_same_logits(model.sync(edited), fresh_logits(hybrid_pair.target, edited))
        assert model.rewind_counts["checkpoint"] == checkpoints + 1
        # A regenerated first reply: back to turn 1's prompt, whose checkpoint is still kept.
        assert model.kept_on_sync(turn1) == len(turn1) - 1
        assert_same_logits(model.sync(turn1), fresh_logits(hybrid_pair.target, turn1))
        # A prompt that shares only a prefix shorter than any checkpoint: a re-read from the start.
        other = turn1[:2] + model.tokenize(" the end")
        assert model.kept_on_sync(other) == 0
        assert_same_logits(model.sync(other), fresh_logits(hybrid_pair.target, other))
        # truncate, not sync: the cached tokens between the checkpoint and the cut are read again.
        model.extend(reply)
        model.truncate(len(other) + 3)
        assert model.cached == (other + reply)[: len(other) + 3]
        more = model.cached + turn1
        assert_same_logits(model.extend(turn1)[-1], fresh_logits(hybrid_pair.target, more))


def test_regenerating_a_reply_reads_one_prompt_token_on_target_and_draft(generator):
    prompt = generator.target.tokenize("in the in the in the")
    first, _ = run(generator, prompt, 4)
    assert generator.target.kept_on_sync(prompt) == len(prompt) - 1
    assert generator.drafters["model"].model.kept_on_sync(prompt) == len(prompt) - 1
    again, _ = run(generator, prompt, 4)
    assert again.tokens == first.tokens
    assert again.stats.prompt_tokens == 1
    # The next turn reuses the cache of the whole first exchange.
    turn2 = [*prompt, *first.tokens, *generator.target.tokenize(" and the")]
    run(generator, prompt, 4)
    nxt, _ = run(generator, turn2, 4, max_tokens=8)
    assert nxt.stats.prompt_tokens <= len(turn2) - len(prompt) - len(first.tokens) + 2


# ----- losslessness at T > 0 ----------------------------------------------------------------------


def use_the_hybrid_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lossless check (tests/lossless.py), from a context where the tiny hybrid target is unsure
    (top p 0.41 at T = 1, 0.46 at T = 0.8), on one thread."""
    monkeypatch.setattr(lossless, "PROMPT", "Hello there")
    monkeypatch.setattr(lossless, "load_generator", functools.partial(load_generator, n_threads=THREADS))


@pytest.mark.parametrize("cfg", [lossless.PURE, lossless.PROCESSED], ids=["T1-pure", "T0.8-topk-topp-minp"])
def test_rejection_sampling_on_the_hybrid_pair_reproduces_the_target(hybrid_pair, cfg, monkeypatch):
    use_the_hybrid_pair(monkeypatch)
    lossless.assert_reproduces_the_target(hybrid_pair, cfg)


def test_the_same_check_on_the_hybrid_pair_catches_an_always_accept_rule(hybrid_pair, monkeypatch):
    use_the_hybrid_pair(monkeypatch)
    lossless.assert_an_always_accept_rule_is_caught(hybrid_pair, monkeypatch)


# ----- models without rollback --------------------------------------------------------------------


def test_a_model_without_rollback_loads_and_chats_with_speculation_off(mamba, hybrid_pair):
    gen = load_generator(mamba, hybrid_pair.draft, n_ctx=256, n_threads=THREADS)
    try:
        assert gen.target.rollback == "none" and not gen.can_speculate
        assert gen.speculation_off == (
            "speculation is off: mamba.gguf (arch mamba) cannot roll back its recurrent state"
        )
        final, events = run(gen, "Once upon a time", 4, max_tokens=12)
        assert final.reason in ("length", "eos") and final.stats.drafted == 0 and final.tokens
        assert all(e.cycle.k == 0 for e in events if isinstance(e, Progress))
        # Its deep rewinds still work: a regenerated reply goes back by a checkpoint.
        again, _ = run(gen, "Once upon a time", 0, max_tokens=12)
        assert again.tokens == final.tokens and again.stats.prompt_tokens == 1
    finally:
        gen.close()


def test_a_draft_without_rollback_is_refused_in_one_line(hybrid_pair, mamba):
    with pytest.raises(UnsupportedModelError, match=r"^the draft mamba\.gguf \(arch mamba\) cannot roll back") as err:
        load_generator(hybrid_pair.target, mamba, n_ctx=256, n_threads=THREADS)
    assert "\n" not in str(err.value)


# ----- memory ------------------------------------------------------------------------------------


def _rs_buffer_mib() -> float:
    """The recurrent-state size llama.cpp logged for the context created last."""
    lines = [m for _, m in llama_log._lines if "llama_memory_recurrent: size =" in m]
    return float(re.search(r"size =\s+([\d.]+) MiB", lines[-1])[1])


def test_snapshots_cost_one_recurrent_state_each(tmp_path):
    spec = tiny_hybrid.HybridSpec(ssm_state_size=64, ssm_time_step_rank=8, ssm_group_count=4)
    path = tiny_hybrid.write_hybrid_gguf(tmp_path / "wide.gguf", spec, tiny_hybrid.hybrid_weights(spec, 1), "wide")
    footprint = memory.read_footprint(path)
    # 2 delta-net layers x 4 bytes x (n_embd_r (d_conv-1)(d_inner + 2 n_group d_state) + n_embd_s d_state d_inner)
    assert footprint.state_bytes == 2 * 4 * (3 * (512 + 2 * 4 * 64) + 64 * 512)
    assert footprint.kv_bytes_per_token == 2 * 2 * (16 + 16) * 2  # only the 2 attention layers
    for depth in (0, 4, 16):
        with LlamaModel.load(path, n_ctx=64, rollback_depth=depth, n_threads=THREADS) as model:
            assert model.rollback_depth == depth
            expected = recurrent.snapshot_bytes(footprint.state_bytes, depth)
            assert _rs_buffer_mib() == pytest.approx(expected / 2**20, abs=0.006)
            model.sync(model.tokenize("in the"))
            state = llama_cpp.llama_state_seq_get_size_ext(model._ctx, 0, llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
            assert footprint.state_bytes < state < footprint.state_bytes + 256  # one state, whatever the depth
    assert footprint.rs_snapshots == 16
    assert footprint.recurrent_bytes() == 17 * footprint.state_bytes


def test_the_memory_plan_counts_target_snapshots_but_not_draft_ones(hybrid_pair):
    target = memory.read_footprint(hybrid_pair.target)
    draft = memory.read_footprint(hybrid_pair.draft)
    assert target.total(0) == target.weights_bytes + 17 * target.state_bytes
    tight = target.total(4096) + draft.weights_bytes + draft.kv_bytes(4096) + draft.state_bytes

    def ram_warnings(ram: int) -> list[str]:
        plan = memory.plan(target, draft, 4096, gpu=False, n_gpu_layers=None, draft_n_gpu_layers=None,
                           ram=ram, vram=None)
        return [w for w in plan.warnings if "RAM" in w]

    assert ram_warnings(int(tight * memory.OVERHEAD) + 1) == []
    assert ram_warnings(int(tight * memory.OVERHEAD) - target.state_bytes)


def test_bench_runs_unchanged_on_a_hybrid_pair_and_names_its_arch_and_rollback(hybrid_pair, capsys):
    import json

    from spectui.cli import main

    args = ["bench", "--target", str(hybrid_pair.target), "--draft", str(hybrid_pair.draft), "-k", "3",
            "--max-tokens", "16", "--threads", str(THREADS), "--prompt", "Once upon a time", "--json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["target_arch"], row["rollback"], row["identical"]) == ("qwen35", "snapshots", True)
    assert 0 < row["acceptance_rate"] < 1
