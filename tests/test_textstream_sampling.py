"""Pure pieces of the engine: streaming text, the sampling pipeline, and the draft-length control."""

from __future__ import annotations

import numpy as np
import pytest

from spectui.engine.generation_config import AUTO, DraftControl, SamplingConfig
from spectui.engine.step import sampling
from spectui.engine.textstream import TextStream


def test_a_character_split_across_tokens_is_never_streamed_in_halves():
    data = "héllo 😀!".encode()
    stream = TextStream()
    pieces = [stream.feed(data[i : i + 1], origin="target") for i in range(len(data))]
    texts = [p.text for chunk in pieces for p in chunk]
    assert "".join(texts) == "héllo 😀!"
    assert all("\ufffd" not in t for t in texts)
    assert pieces[data.index("😀".encode()) + 1] == []  # mid-emoji: nothing shown yet


def test_a_reply_that_ends_inside_a_character_leaves_it_out():
    """Cut by max_tokens after the first byte of '€': nothing of it is shown, not U+FFFD
    (llama-server sends no incomplete character either); bytes that can never be UTF-8 still are."""
    stream = TextStream()
    shown = stream.feed(b"price: \xe2\x82", origin="target") + stream.flush()
    assert "".join(p.text for p in shown) == stream.text == "price: "
    broken = TextStream()
    assert "".join(p.text for p in broken.feed(b"a\xffb", origin="target") + broken.flush()) == "a\ufffdb"


def test_stop_string_spanning_tokens_is_held_back_then_cut():
    stream = TextStream(stop=["<END>"])
    shown = [p.text for c in [b"abc<", b"EN", b"D>tail"] for p in stream.feed(c, origin="model")]
    assert "".join(shown) == "abc"
    assert stream.stopped and stream.text == "abc"


def test_held_back_prefix_is_released_when_it_does_not_complete():
    stream = TextStream(stop=["<END>"])
    assert [p.text for p in stream.feed(b"a<E", origin="target")] == ["a"]
    assert "".join(p.text for p in stream.feed(b"x", origin="target")) == "<Ex"


def test_pieces_keep_their_source():
    stream = TextStream()
    pieces = stream.feed(b"draft ", origin="model") + stream.feed(b"target", origin="target")
    assert [(p.text, p.from_draft) for p in pieces] == [("draft ", True), ("target", False)]


def test_distribution_applies_top_k_top_p_min_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.04, 0.01], dtype=np.float32))
    full = sampling.distribution(logits, SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(full.dense(5), [0.5, 0.3, 0.15, 0.04, 0.01], rtol=1e-5)
    top2 = sampling.distribution(logits, SamplingConfig(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    np.testing.assert_allclose(top2.dense(5), [0.625, 0.375, 0, 0, 0], rtol=1e-5)
    nucleus = sampling.distribution(logits, SamplingConfig(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
    assert set(nucleus.ids) == {0, 1}  # 0.5 + 0.3 reaches 0.8
    minp = sampling.distribution(logits, SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1))
    assert set(minp.ids) == {0, 1, 2}  # 0.04 < 0.1 * 0.5
    cold = sampling.distribution(logits, SamplingConfig(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0))
    assert cold.prob(0) > 0.5


def test_residual_is_the_normalized_positive_part_of_p_minus_q():
    p = sampling.Dist(np.array([0, 1, 2]), np.array([0.5, 0.3, 0.2]))
    q = sampling.Dist(np.array([1, 3]), np.array([0.6, 0.4]))
    r = sampling.residual(p, q)
    np.testing.assert_allclose(r.dense(4), [0.5 / 0.7, 0, 0.2 / 0.7, 0])


def test_residual_of_equal_distributions_falls_back_to_p():
    p = sampling.Dist(np.array([4, 7]), np.array([0.25, 0.75]))
    assert sampling.residual(p, p) is p


@pytest.mark.parametrize("seed", [0, 1])
def test_sample_draws_in_proportion(seed):
    dist = sampling.Dist(np.array([3, 9]), np.array([0.2, 0.8]))
    rng = np.random.default_rng(seed)
    draws = [sampling.sample(dist, rng) for _ in range(4000)]
    assert set(draws) == {3, 9}
    assert 0.17 < draws.count(3) / 4000 < 0.23


def test_draft_control_steps_through_one_to_sixteen_and_auto():
    control = DraftControl(15)
    assert control.step(+1) == 16
    assert control.step(+1) == AUTO
    assert control.step(-1) == 16
    control.set_k(1)
    assert control.step(-1) == 1
    assert control.toggle() is False and control.effective_k() == 0
    with pytest.raises(ValueError):
        control.set_k(17)
