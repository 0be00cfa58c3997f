"""The fast processed distribution is the reference one: same probabilities, bit for bit.

`sampling.distribution` finds the top-k ids from the row's column maxima instead of
partitioning all of it (issue #27: host time per cycle on a GPU). Held here to
`sampling.reference_distribution` (the processing written plainly) on random rows of real
vocabulary sizes, with ties (quantized logits), ties exactly at the k-th value, masked (-inf)
tokens and a NaN, for every kind of cut-off. The probabilities must be identical arrays; an id
may differ only where its logit ties with the reference's id at that place (which tied id a
partition keeps is arbitrary in both).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.step import sampling


@pytest.fixture(autouse=True)
def fast_path_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The strided path serves 100k+ vocabularies; here it runs at every size tested."""
    monkeypatch.setattr(sampling, "FAST_FROM_VOCAB", 0)


CONFIGS = [
    SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),  # the app's sampled default
    SamplingConfig(temperature=1.0, top_k=10, top_p=1.0, min_p=0.0),  # the draft's greedy confidence
    SamplingConfig(temperature=0.3, top_k=1, top_p=1.0, min_p=0.0),
    SamplingConfig(temperature=1.5, top_k=200, top_p=0.5, min_p=0.0),
    SamplingConfig(temperature=0.7, top_k=64, top_p=1.0, min_p=0.2),
]


def rows(n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    normal = (rng.standard_normal(n_vocab) * 3).astype(np.float32)
    quantized = np.round(rng.standard_normal(n_vocab) * 4).astype(np.float32)  # thousands of ties
    boundary = normal.copy()
    top = np.argsort(-normal)[:60]
    boundary[top[30:60]] = normal[top[35]]  # 30 ids tie across the k = 40 boundary
    masked = normal.copy()
    masked[rng.random(n_vocab) < 0.9] = -np.inf  # 90 % of the vocabulary masked out
    peaked = normal.copy()
    peaked[rng.integers(n_vocab)] += 40.0  # one token takes almost all the mass
    return {"normal": normal, "quantized": quantized, "boundary": boundary, "masked": masked, "peaked": peaked}


def assert_same_distribution(logits: np.ndarray, fast: sampling.Dist, reference: sampling.Dist) -> None:
    assert np.array_equal(fast.probs, reference.probs)  # identical floats, not close ones
    differ = fast.ids != reference.ids
    assert np.array_equal(logits[fast.ids[differ]], logits[reference.ids[differ]])  # only swapped ties


@pytest.mark.parametrize("n_vocab", [32000, 152064])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"T{c.temperature}-k{c.top_k}-p{c.top_p}-m{c.min_p}")
def test_the_fast_distribution_equals_the_reference_on_random_rows(n_vocab: int, cfg: SamplingConfig) -> None:
    for seed in range(3):
        for name, logits in rows(n_vocab, seed).items():
            fast, reference = sampling.distribution(logits, cfg), sampling.reference_distribution(logits, cfg)
            assert len(fast.ids) == len(reference.ids), name
            assert_same_distribution(logits, fast, reference)


def test_top_k_ids_keeps_the_k_largest_values_even_when_they_tie_at_the_boundary() -> None:
    for name, logits in rows(50000, 11).items():
        for k in (1, 7, 40, 300):
            ids = sampling.top_k_ids(logits, k)
            assert len(set(ids.tolist())) == k, name
            assert np.array_equal(np.sort(logits[ids]), np.sort(logits)[-k:]), (name, k)


def test_a_row_with_nan_falls_back_to_the_plain_partition() -> None:
    logits = rows(40000, 3)["normal"]
    logits[::7] = np.nan  # every column holds a NaN
    ids = sampling.top_k_ids(logits, 40)
    assert np.array_equal(np.sort(ids), np.sort(np.argpartition(logits, -40)[-40:]))


def test_one_nan_anywhere_falls_back_and_the_logits_past_the_grid_count() -> None:
    """A single NaN (in any column) takes the plain partition, as numpy's own would pick it; the
    < STRIPES logits past the (STRIPES, n // STRIPES) grid are candidates like the rest."""
    n_vocab = 50_000 + sampling.STRIPES - 1  # the most logits past the grid
    for where in (0, 12_345, n_vocab - 1):
        logits = rows(n_vocab, 4)["normal"]
        logits[where] = np.nan
        ids = sampling.top_k_ids(logits, 40)
        assert np.array_equal(np.sort(ids), np.sort(np.argpartition(logits, -40)[-40:])), where
    logits = rows(n_vocab, 5)["normal"]
    logits[-(sampling.STRIPES - 1):] = 100.0 + np.arange(sampling.STRIPES - 1)  # the best all past the grid
    ids = sampling.top_k_ids(logits, 40)
    assert set(range(n_vocab - sampling.STRIPES + 1, n_vocab)) <= set(ids.tolist())
    assert np.array_equal(np.sort(logits[ids]), np.sort(logits)[-40:])


def test_small_vocabularies_take_the_plain_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below 2k columns there is nothing to cut, and below FAST_FROM_VOCAB the plain
    partition is as fast: both run it (a test that wants the fast path on the tiny models lowers
    both, as test_lossless_sampling does)."""
    logits = rows(277, 5)["normal"]
    assert np.array_equal(sampling.top_k_ids(logits, 40), np.argpartition(logits, -40)[-40:])
    monkeypatch.setattr(sampling, "FAST_FROM_VOCAB", 100_000)
    row = rows(32000, 5)["normal"]
    assert np.array_equal(sampling.top_k_ids(row, 40), np.argpartition(row, -40)[-40:])


def test_threads_sampling_at_once_get_their_own_distributions() -> None:
    """The fast path keeps no state between calls (an earlier one reused a boolean row per
    thread): generators sampling at once never mix their rows."""
    cfg = CONFIGS[0]
    logits = [rows(60000, seed)["normal"] for seed in range(8)]
    expected = [sampling.reference_distribution(row, cfg) for row in logits]

    def work(i: int) -> bool:
        return all(np.array_equal(sampling.distribution(logits[i], cfg).probs, expected[i].probs)
                   for _ in range(20))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))
