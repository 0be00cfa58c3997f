"""K = auto on synthetic cycles: per-drafter acceptance and cost, probes, early stop, and a free
drafter (a lookup) priced as well as a draft model."""

from __future__ import annotations

import numpy as np
import pytest
from autodraft_cycles import MODEL, feed_cycles, step

from spectui.engine.planning.autodraft import FIRST_GUESS_K, PROBE_K, REPRICE_EVERY, AutoDraft
from spectui.engine.planning.figures import PROBE_EVERY
from spectui.engine.planning.passcosts import STALE_PASSES
from spectui.engine.planning.pays import LAST_PROBE


def test_nothing_measured_gives_the_first_guess():
    auto = AutoDraft()
    assert auto.k(MODEL) == FIRST_GUESS_K


def test_auto_drafts_long_when_the_draft_is_cheap_and_right():
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.95, draft_s=0.002, verify_s=0.03)
    assert auto.k(MODEL) >= 6
    assert auto.expected_speedup(MODEL, auto.k(MODEL)) > 2


def test_auto_turns_speculation_off_when_it_cannot_pay_and_probes_later():
    """Probes come after 8 cycles at K = 0, then twice as long after each (a probe of a draft
    that does not pay costs more than the cycle it replaces), never rarer than every 64."""
    def choices(auto: AutoDraft, n: int) -> list[int]:
        picked = []
        for _ in range(n):
            picked.append(auto.k(MODEL))
            if picked[-1]:  # the probe's cycle: its first token rejected, as before
                auto.observe(step(picked[-1], 0, 0.02 * picked[-1], 0.033, work=picked[-1]))
        return picked

    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.2, draft_s=0.02, verify_s=0.03)
    later = choices(auto, 2 * LAST_PROBE)
    assert later.count(0) >= 2 * LAST_PROBE - 3  # mostly off
    assert any(k > 0 for k in later)  # but it probes, so it can come back
    fresh = AutoDraft()
    feed_cycles(fresh, accept_rate=0.2, draft_s=0.02, verify_s=0.03, n=3)
    first = choices(fresh, 3 * PROBE_EVERY)
    probes = [i for i, k in enumerate(first) if k > 0]
    assert len(probes) == 2 and probes[1] - probes[0] == 2 * PROBE_EVERY


def test_a_free_drafter_is_priced_and_drafts_as_far_as_acceptance_pays():
    """A lookup does no forward passes (work 0): its cost is a tiny per-call time, and K = auto
    must still learn it rather than sit at its first guess."""
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.9, draft_s=0.0, verify_s=0.03, source="ngram", work_per_token=0,
                call_s=0.00005)
    c_call, c_unit = auto.of("ngram").cost.coefficients()
    assert c_call == pytest.approx(0.00005, rel=0.05) and c_unit == 0.0
    assert auto.k("ngram") > FIRST_GUESS_K


def test_each_drafter_of_a_combination_has_its_own_figures():
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.95, draft_s=0.0, verify_s=0.03, source="ngram", work_per_token=0,
                call_s=0.00005)
    feed_cycles(auto, accept_rate=0.3, draft_s=0.015, verify_s=0.03, source=MODEL)
    assert auto.of("ngram").acceptance > 0.8 > 0.45 > auto.of(MODEL).acceptance
    assert auto.k("ngram") > auto.k(MODEL)


def test_acceptance_is_measured_per_position():
    """A drafter whose first token is always right and the rest never: position 1 near 1, 2 near 0."""
    auto = AutoDraft()
    for _ in range(40):
        auto.observe(step(4, 1, 0.004, 0.03, work=4))
    figures = auto.of(MODEL)
    assert figures.position_acceptance(0) > 0.9
    assert figures.position_acceptance(1) < 0.2
    assert auto.k(MODEL) == 1


def test_auto_p_min_follows_the_measured_cost_of_one_more_draft_token():
    cheap, dear = AutoDraft(), AutoDraft()
    feed_cycles(cheap, accept_rate=0.9, draft_s=0.002, verify_s=0.03)
    feed_cycles(dear, accept_rate=0.9, draft_s=0.025, verify_s=0.03)
    assert cheap.p_min(MODEL) < 0.3 < 0.6 < dear.p_min(MODEL) <= 0.95


def test_a_draft_cut_short_is_not_charged_as_a_dearer_token():
    auto = AutoDraft()
    for _ in range(20):  # one token drafted, but two passes ran (the second found it unsure)
        auto.observe(step(1, 1, draft_s=0.02, verify_s=0.03, work=2))
        auto.observe(step(0, 0, draft_s=0.05, verify_s=0.02, work=1, caught_up=9))  # a catch-up pass
    assert auto.p_min(MODEL) == pytest.approx(0.01 / auto.verify_cost(1) / auto.of(MODEL).calibration)


def test_a_probe_drafts_whatever_the_confidence():
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.2, draft_s=0.02, verify_s=0.03)
    probes = []
    for _ in range(2 * LAST_PROBE):
        k = auto.k(MODEL)
        probes.append((k, auto.p_min(MODEL)))
    assert (PROBE_K, 0.0) in probes
    assert all(p > 0 for k, p in probes if k == 0)


def test_one_slow_pass_does_not_price_a_batch_size_out_for_good():
    """The first pass of a new batch shape is slow (llama.cpp re-plans its graph); each size is
    priced by the median of its last passes, so a few normal passes set it right again."""
    auto = AutoDraft()
    auto.observe(step(5, 5, 0.01, verify_s=0.200, work=5))  # 6 rows, one slow first pass
    for _ in range(2):
        auto.observe(step(5, 5, 0.01, verify_s=0.040, work=5))
    assert auto.verify_cost(6) == pytest.approx(0.040)


def test_greedy_and_sampled_figures_share_the_targets_pass_costs(tiny_pair):
    from spectui.engine.generator import load_generator

    gen = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=256, n_threads=1)
    try:
        gen.auto(True).observe(step(3, 2, 0.01, verify_s=0.05, work=3))
        assert gen.auto(False).verify_cost(4) == pytest.approx(0.05)
        assert gen.auto(False).of(MODEL).trials[0] == 0  # acceptance stays apart
    finally:
        gen.close()


def test_a_few_unlucky_rejections_do_not_turn_a_paying_draft_off():
    """At T > 0 each judgement is a coin flip: after a long record of 80 % acceptance, eight
    first-token rejections in a row must not drop k to 0 (with a memory of about 10 judgements
    they did)."""
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.8, draft_s=0.008, verify_s=0.03, n=60)
    for _ in range(8):
        auto.observe(step(max(auto.k(MODEL), 1), 0, 0.024, verify_s=0.033, work=3))
    assert auto.k(MODEL) > 0


def test_an_untried_position_is_taken_as_likely_as_the_one_before():
    """Drafts of 2: the first token is accepted 60 % of the time, the second (given the first)
    95 %. Position 3 was never tried: it is priced like position 2, not like the pooled 73 %,
    so K = auto tries longer drafts when the survivors are easy."""
    auto = AutoDraft()
    rng = np.random.default_rng(1)
    for _ in range(60):
        accepted = 0 if rng.random() > 0.6 else (2 if rng.random() < 0.95 else 1)
        auto.observe(step(2, accepted, 0.02, 0.03, work=2))
    figures = auto.of(MODEL)
    assert figures.acceptance < 0.8
    assert figures.position_acceptance(1) > 0.85 and figures.position_acceptance(2) > 0.85


def test_a_probe_that_must_catch_up_first_keeps_the_last_measured_cost():
    """A probe after a hold makes the draft model read every token it missed before drafting: that
    cycle is not a typical cost, so it is not priced, and the cost measured before the hold stays
    the figure K = auto plans on until a steady cycle replaces it (it once left nothing measured)."""
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.2, draft_s=0.02, verify_s=0.03)
    before = auto.of(MODEL).cost.coefficients()
    picked = [auto.k(MODEL)]
    while picked[-1] == 0 and len(picked) <= LAST_PROBE:
        picked.append(auto.k(MODEL))
    assert picked[-1] == PROBE_K and len(picked) > 1  # held, then a probe
    auto.observe(step(PROBE_K, 0, 0.5, 0.033, work=PROBE_K + 40, caught_up=40))
    assert auto.of(MODEL).measured and auto.of(MODEL).cost.coefficients() == before
    auto.observe(step(PROBE_K, 0, 0.004, 0.033, work=PROBE_K))  # a steady cycle, ten times cheaper
    assert auto.of(MODEL).cost.coefficients()[1] < before[1] / 2


def test_a_held_drafter_is_priced_again_when_its_figures_or_the_pass_costs_move(monkeypatch):
    """Held at K = 0 (a dear draft), its k is not worked out anew on every ask (pricing each k was
    most of K = auto's work in a held cycle) but at once when its own figures move and within
    `REPRICE_EVERY` asks when only the target's pass costs do: here the target gets ten times
    dearer, so the same draft pays, and K = auto must see it before the next probe is due."""
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.6, draft_s=0.025, verify_s=0.03)
    priced = []
    speedups = auto.speedups
    monkeypatch.setattr(auto, "speedups", lambda source, longest: priced.append(source) or speedups(source, longest))
    auto.probes.spend_all()  # no probe budget left: every ask answers 0
    assert auto.k(MODEL) == 0 and MODEL in auto.holds  # held: a draft token costs most of a pass
    asks = 3 * REPRICE_EVERY
    assert [auto.k(MODEL) for _ in range(asks)] == [0] * asks
    assert asks // REPRICE_EVERY <= len(priced) <= 1 + asks // REPRICE_EVERY  # every REPRICE_EVERY asks
    before = len(priced)
    auto.observe(step(2, 2, 0.05, 0.033, work=2))  # a probe's cycle: its figures moved
    auto.k(MODEL)
    assert len(priced) == before + 1  # priced again at once
    assert auto.holds[MODEL].acceptance == auto.of(MODEL).acceptance  # and the reason says so
    for _ in range(STALE_PASSES):  # the target's passes got ten times dearer (plain cycles)
        auto.observe(step(0, 0, 0.0, 0.3, work=0))
    for rows in range(2, 8):
        auto.observe(step(rows - 1, 0, 0.0, 0.3 * (1 + 0.1 * (rows - 1)), work=0, source="other"))
    ks = [auto.k(MODEL) for _ in range(REPRICE_EVERY + 1)]
    assert ks == [0] * len(ks)  # it would pay, but its return (a catch-up, a probe's cost) waits for the budget
    auto.probes.refill()  # the probe budget has room again
    ks = [auto.k(MODEL) for _ in range(REPRICE_EVERY + 1)]
    assert ks[-1] > 0  # the same draft now pays, seen within REPRICE_EVERY asks
