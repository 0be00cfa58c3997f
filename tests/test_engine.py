"""The speculative loop on real llama.cpp with tiny generated models: greedy equivalence,
KV rollback, K changes mid-reply, stops, and the clear errors."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import EOS_PROMPT
from numerics import GreedyReference, assert_same_evaluation

from spectui.engine.events import Finished, Progress, TextPiece
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator, load_generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import FixedBudget
from spectui.engine.step.speculative import speculative_step
from spectui.errors import IncompatibleDraftError, LoadCancelled, ModelLoadError

PROMPTS = ["The story of the wind", "Hello there, what is in the", "in the in the in the", "x"]


@pytest.fixture(scope="module")
def generator(tiny_pair) -> Generator:
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=1024)
    yield gen
    gen.close()


def run(gen: Generator, prompt: str, k, max_tokens: int = 48, **sampling) -> tuple[Finished, list]:
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig(**sampling))
    events = list(gen.generate(gen.target.tokenize(prompt), config, DraftControl(k)))
    assert isinstance(events[-1], Finished)
    return events[-1], events


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculation_equals_target_greedy_for_every_k(generator, prompt):
    """Token for token on the CPU; on a GPU, where a verify pass rounds unlike a 1-row pass, the
    reply may leave the target's only at a near-tie (numerics.GreedyReference)."""
    baseline = GreedyReference(generator.target, generator.target.tokenize(prompt),
                               lambda: run(generator, prompt, 0)[0], label=repr(prompt))
    assert len(baseline.tokens) >= 8
    drafted_any = False
    for k in [1, 2, 3, 4, 5, 6, 7, 8, AUTO]:
        spec = baseline.check(lambda k=k: run(generator, prompt, k)[0], label=f"K={k}")
        drafted_any |= spec.stats.drafted > 0
        if k != AUTO:
            assert 0 < spec.stats.acceptance_rate < 1
            assert spec.stats.mean_accepted > 1.0
    assert drafted_any


def test_eos_inside_an_accepted_draft_run_ends_the_reply_identically(eos_pair):
    gen = load_generator(eos_pair.target, eos_pair.draft, n_ctx=512)
    try:
        baseline = GreedyReference(gen.target, gen.target.tokenize(EOS_PROMPT),
                                   lambda: run(gen, EOS_PROMPT, 0, max_tokens=64)[0], label="eos")
        assert baseline.result.reason == "eos"
        assert 6 <= len(baseline.tokens) < 64
        ended_mid_draft = 0
        for k in range(1, 9):
            events: list = []

            def reply(k=k, events=events):
                final, seen = run(gen, EOS_PROMPT, k, max_tokens=64)
                events.extend(seen)
                return final

            spec = baseline.check(reply, label=f"K={k}")
            if spec.tokens != baseline.tokens:  # a GPU's near-tie (checked): the rest is another reply
                continue
            assert spec.reason == "eos"
            last_cycle = [e for e in events if isinstance(e, Progress)][-1].cycle
            # EOS was itself an accepted draft token: the cycle took fewer tokens than it accepted.
            ended_mid_draft += last_cycle.emitted < last_cycle.accepted
        assert ended_mid_draft > 0
    finally:
        gen.close()


def test_target_logits_after_rollback_equal_a_fresh_evaluation(generator, tiny_pair):
    target, proposer = generator.target, generator.drafter()
    context = target.tokenize(PROMPTS[0])
    target.sync(context[:-1])
    proposer.prefill(context[:-1])
    rng = np.random.default_rng(0)
    cfg = SamplingConfig(temperature=0.0)
    rejections = 0
    for _ in range(12):
        step = speculative_step(target, proposer, context, FixedBudget(8), cfg, rng)
        rejections += step.accepted < step.drafted
        context += step.tokens
    assert rejections > 0
    assert target.cached == context[:-1]
    after_rollback = target.extend(context[-1:]).copy()
    with LlamaModel.load(tiny_pair.target, n_ctx=1024) as fresh:
        expected = fresh.sync(context).copy()
        dropped = fresh.sync([*context[:-2], context[-1]]).copy()  # a cache that lost a token
    assert_same_evaluation(after_rollback[0], expected, wrong=dropped)


def test_draft_length_change_applies_from_the_next_cycle(generator):
    control = DraftControl(6)
    ks = []
    config = GenerationConfig(max_tokens=80)
    for event in generator.generate(generator.target.tokenize(PROMPTS[1]), config, control):
        if isinstance(event, Progress):
            ks.append(event.cycle.k)
            if len(ks) == 3:
                control.set_k(2)
            if len(ks) == 6:
                control.toggle()
    assert ks[:3] == [6, 6, 6]
    assert set(ks[3:6]) <= {2, 1}  # 1 only when max_tokens leaves room for no more
    assert ks[6:] and set(ks[6:]) == {0}


def test_same_seed_same_sampled_output(generator):
    first, _ = run(generator, PROMPTS[0], 4, temperature=0.8, seed=7)
    again, _ = run(generator, PROMPTS[0], 4, temperature=0.8, seed=7)
    other, _ = run(generator, PROMPTS[0], 4, temperature=0.8, seed=8)
    assert first.tokens == again.tokens
    assert first.tokens != other.tokens


def test_stream_pieces_add_up_and_mark_draft_tokens(generator):
    final, events = run(generator, PROMPTS[0], 4)
    pieces = [e for e in events if isinstance(e, TextPiece)]
    assert "".join(p.text for p in pieces) == final.text
    assert any(p.from_draft for p in pieces) and any(not p.from_draft for p in pieces)
    assert final.stats.generated_tokens == len(final.tokens)
    assert sum(final.stats.accept_histogram) == sum(
        1 for e in events if isinstance(e, Progress) and e.cycle.drafted
    )


def test_stop_string_ends_the_reply_before_it(generator):
    baseline, _ = run(generator, PROMPTS[1], 0)
    stop = baseline.text[10:13]
    config = GenerationConfig(max_tokens=48, stop=(stop,))
    events = list(generator.generate(generator.target.tokenize(PROMPTS[1]), config, DraftControl(4)))
    final = events[-1]
    assert final.reason == "stop"
    assert final.text == baseline.text[: baseline.text.index(stop)]
    assert stop not in "".join(e.text for e in events if isinstance(e, TextPiece))


def test_next_turn_reuses_the_cached_prompt(generator):
    first, _ = run(generator, PROMPTS[2], 4, max_tokens=8)
    prompt = generator.target.tokenize(PROMPTS[2]) + list(first.tokens)
    extra = generator.target.tokenize(" and the")
    events = list(generator.generate(prompt + extra, GenerationConfig(max_tokens=4), DraftControl(4)))
    assert events[-1].stats.prompt_tokens <= len(extra) + 1


def test_full_context_ends_with_a_clear_message(tiny_pair):
    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=64)
    try:
        n_ctx = gen.target.n_ctx  # llama.cpp may round the request up
        filler = gen.target.tokenize(PROMPTS[1])
        prompt = (filler * n_ctx)[: n_ctx - 12]
        config = GenerationConfig(max_tokens=500)
        final = list(gen.generate(prompt, config, DraftControl(4)))[-1]
        assert final.reason == "context"
        assert f"context is full ({n_ctx} tokens)" in final.message
        assert len(final.tokens) == 13  # 12 fill the cache; the 13th was pending when it filled
        too_long = list(gen.generate(filler * n_ctx, config, DraftControl(4)))[-1]
        assert too_long.reason == "context" and too_long.tokens == ()
    finally:
        gen.close()


def test_incompatible_draft_is_refused_naming_the_token(tiny_pair, incompatible_draft):
    with pytest.raises(IncompatibleDraftError, match=r"token 100: '_' vs '`'"):
        load_generator(tiny_pair.target, incompatible_draft, n_ctx=64)


def test_not_a_gguf_and_missing_files_are_clear(tmp_path):
    text_file = tmp_path / "notes.gguf"
    text_file.write_text("hello")
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        LlamaModel.load(text_file)
    with pytest.raises(ModelLoadError, match="model file not found"):
        LlamaModel.load(tmp_path / "missing.gguf")


def test_truncated_gguf_is_reported_as_truncated(tiny_pair, tmp_path):
    truncated = tmp_path / "cut.gguf"
    size = tiny_pair.target.stat().st_size
    with tiny_pair.target.open("rb") as src, truncated.open("wb") as dst:
        dst.write(src.read(size // 2))
    with pytest.raises(ModelLoadError, match=r"truncated \(\d[\d,]* of [\d,]+ bytes\)"):
        LlamaModel.load(truncated)


def test_a_complete_copy_loads_with_its_metadata(tiny_pair, tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(tiny_pair.target, copy)
    with LlamaModel.load(copy, n_ctx=32) as model:
        assert (model.n_vocab, model.n_layer, model.name) == (275, 4, "tiny-target")
        assert "im_start" in (model.chat_template or "")


def test_cancel_stops_between_cycles(generator):
    seen = []

    def cancelled() -> bool:
        return len(seen) >= 2

    for event in generator.generate(generator.target.tokenize(PROMPTS[0]), GenerationConfig(max_tokens=200),
                                    DraftControl(4), cancelled=cancelled):
        if isinstance(event, Progress):
            seen.append(event)
    assert event.reason == "cancelled"
    assert len(seen) == 2


def test_paths_are_accepted_as_strings(tiny_pair):
    gen = load_generator(str(tiny_pair.target), None, n_ctx=64)
    try:  # no draft model: the lookups that need none (suffix by default)
        assert "model" not in gen.kinds and gen.default_kind == "suffix"
        final, _ = run(gen, PROMPTS[0], AUTO, max_tokens=5)
        assert len(final.tokens) == 5 and set(final.stats.by_source) <= {"suffix"}
    finally:
        gen.close()


def test_tokenizer_round_trips_text(generator):
    text = "Hello there, the world is in é and ü 😀"
    assert generator.target.detokenize(generator.target.tokenize(text)) == text


def test_a_progress_callback_returning_false_cancels_the_load(tiny_pair):
    seen: list[float] = []

    def stop_at_once(fraction: float) -> bool:
        seen.append(fraction)
        return False

    with pytest.raises(LoadCancelled, match="was cancelled"):
        LlamaModel.load(tiny_pair.target, n_ctx=64, progress=stop_at_once)
    assert seen  # llama.cpp called back before giving up
    with LlamaModel.load(tiny_pair.target, n_ctx=64, progress=seen.append) as model:
        assert model.n_layer == 4 and seen[-1] == pytest.approx(1.0)


def test_a_baseline_probe_decodes_its_tokens_without_speculation_and_changes_nothing(generator):
    baseline, _ = run(generator, PROMPTS[0], 0)
    config = GenerationConfig(max_tokens=48, baseline_probe=8)
    events = list(generator.generate(generator.target.tokenize(PROMPTS[0]), config, DraftControl(4)))
    final = events[-1]
    cycles = [e.cycle for e in events if isinstance(e, Progress)]
    probes = [c for c in cycles if c.probe]
    assert final.tokens == baseline.tokens  # the reply is the same
    assert len(probes) == 8 and all(c.k == 0 and c.drafted == 0 for c in probes)
    assert cycles[:8] == probes and any(c.drafted for c in cycles[8:])
    assert final.stats.probe_tokens == 8 and final.stats.probe_tps > 0
    assert final.stats.decode_tokens == len(final.tokens) - 1 - 8  # the probe is timed apart


def test_common_prefix_is_the_token_by_token_walks_for_lists_tuples_and_every_split():
    """`LlamaModel.common_prefix` compares whole lists first (a drafter asks every cycle with
    the whole context); the answer is still the walk's: where the two part, if they do."""
    from types import SimpleNamespace

    def walk(cached, tokens):
        n = 0
        for a, b in zip(cached, tokens, strict=False):
            if a != b:
                break
            n += 1
        return n

    rng = np.random.default_rng(3)
    cached = rng.integers(0, 50, 300).tolist()
    model = SimpleNamespace(cached=cached)
    cases = [[*cached, 1, 2], cached, cached[:-1], [], cached[:120], (*cached, 4)]
    for split in (0, 1, 150, 299):
        changed = list(cached)
        changed[split] += 1
        cases += [changed, changed[: split + 1], tuple(changed)]
    for tokens in cases:
        assert LlamaModel.common_prefix(model, tokens) == walk(cached, tokens)
