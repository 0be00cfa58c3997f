"""When a lookup proposes (no llama.cpp needed): calibration from what the target accepted, the
thresholds alone and ahead of a draft model, judging withheld candidates; and reading past chats
from the store for the suffix drafter."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from autodraft_cycles import feed_cycles

from spectui.chat.store import ChatStore
from spectui.chat.template import ChatFormat, ChatMessage
from spectui.engine.drafters import lookup_gate
from spectui.engine.drafters.chain import AheadOf
from spectui.engine.drafters.lookup_base import SHADOW_EVERY
from spectui.engine.drafters.lookup_gate import Calibration
from spectui.engine.drafters.ngram import NgramDrafter
from spectui.engine.drafters.suffix import SuffixDrafter
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.planning.autodraft import MEASURE_EVERY, AutoDraft
from spectui.engine.step.drafter import BudgetDefaults, CappedBudget, FixedBudget
from spectui.session.history import history_source, read_past_chats

GREEDY = SamplingConfig(temperature=0.0)
RNG = np.random.default_rng(0)
LOOP = [7, 1, 2, 3, 4, 5, 6, 1, 2, 3]  # "1 2 3" occurred before, followed by "4 5 6 1 2 3 ..."
WEAK = [5, 1, 2, 3, 6, 1, 2, 4, 7, 1, 2]  # "1 2" occurred twice, followed by 3, then by 4


def propose(drafter, context, budget=None):
    return drafter.propose(context, budget or FixedBudget(5), GREEDY, RNG)


def test_calibration_learns_how_often_each_kind_of_evidence_is_right():
    calibration = Calibration()
    prior = calibration.estimate(True, 2, [1.0, 1.0, 1.0])
    assert prior == pytest.approx([0.5, 0.4, 0.32])
    for _ in range(30):
        calibration.observe(True, 2, [1.0, 1.0, 1.0], accepted=0)
        calibration.observe(True, 5, [1.0, 1.0, 1.0], accepted=3)
    assert calibration.estimate(True, 2, [1.0])[0] < 0.1  # short matches: always wrong
    assert calibration.estimate(True, 5, [1.0, 1.0, 1.0])[2] > 0.8  # long matches: always right
    assert calibration.estimate(False, 5, [1.0]) == pytest.approx([0.5])  # sampling learns apart


def test_a_new_kind_of_evidence_starts_from_what_every_kind_showed():
    # Sampling from a target that spreads its mass: point-mass proposals are rarely accepted. A
    # kind of match not seen yet is doubted from the start instead of proposed at one half.
    calibration = Calibration()
    for bucket in range(6):
        for _ in range(5):
            calibration.observe(False, bucket, [1.0], accepted=0)
    assert calibration.estimate(False, 99, [1.0])[0] < 0.2
    assert calibration.estimate(True, 99, [1.0]) == pytest.approx([0.5])  # greedy figures apart


def test_each_kind_of_evidence_learns_how_far_it_stays_right():
    # Short matches are right about the next token and wrong two on (a number that changes every
    # line); long matches stay right. One shared figure for later tokens rated both alike.
    calibration = Calibration()
    for _ in range(30):
        calibration.observe(True, 1, [1.0, 1.0, 1.0], accepted=1)
        calibration.observe(True, 4, [1.0, 1.0, 1.0], accepted=3)
    short, long = calibration.estimate(True, 1, [1.0, 1.0]), calibration.estimate(True, 4, [1.0, 1.0])
    assert short[0] > 0.9 and long[0] > 0.9
    assert short[1] < 0.3 < 0.9 < long[1]
    # A kind not seen yet starts from what all kinds showed so far (about half the later tokens right).
    fresh = calibration.estimate(True, 2, [1.0, 1.0])
    assert short[1] < fresh[1] / fresh[0] < long[1]


def test_trim_stops_before_an_unlikely_token_and_at_k_autos_early_stop():
    assert lookup_gate.trim([0.9, 0.6, 0.2, 0.05], min_token_prob=0.1, p_min=0.0) == 3
    assert lookup_gate.trim([0.9, 0.6, 0.2, 0.05], min_token_prob=0.1, p_min=0.5) == 2  # 0.2/0.6 < 0.5


def test_thresholds_before_anything_is_measured():
    assert lookup_gate.min_score(FixedBudget(5), 6, "", 5) == lookup_gate.ALONE_MIN_SCORE
    assert lookup_gate.min_score(FixedBudget(5), 6, "model", 5) == lookup_gate.CHAINED_MIN_SCORE
    assert lookup_gate.min_score(FixedBudget(1), 2, "model", 1) == pytest.approx(0.8)  # K = 1: one sure token


def test_thresholds_from_k_autos_measurements():
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.9, draft_s=0.002, verify_s=0.03)  # a draft model worth ~2x
    budget = CappedBudget(auto, 16)
    extra_rows = auto.verify_cost(6) / auto.verify_cost(1)
    assert lookup_gate.min_score(budget, 6, "", 5) == pytest.approx(extra_rows - 1)
    best = max(auto.expected_speedup("model", n) for n in range(1, 17))
    assert best > 1.5
    assert lookup_gate.min_score(AheadOf(budget, "model"), 6, "model", 5) == pytest.approx(best * extra_rows - 1)


def test_a_match_is_proposed_alone_but_ahead_of_a_draft_model_only_once_it_has_proved_right():
    alone = propose(NgramDrafter(), LOOP)
    assert alone.tokens == [4, 5, 6, 1, 2] and alone.source == "ngram" and alone.work == 0
    assert all(q is None for q in alone.dists)  # point masses
    assert alone.confidences[0] == pytest.approx(0.5)  # the prior: nothing judged yet
    drafter, ahead = NgramDrafter(), AheadOf(FixedBudget(5), "model")
    context, withheld = list(LOOP), 0
    while not propose(drafter, context, ahead).tokens:
        withheld += 1
        context += [4, 5, 6, 1, 2, 3]  # the target went on as the lookup said
        assert withheld < 10
    assert withheld >= 1
    # "1 2" was followed by 3 once and by 4 once: half as sure, enough alone but not ahead of a model.
    assert propose(NgramDrafter(), WEAK).tokens[:1] == [4]
    assert propose(NgramDrafter(), WEAK, AheadOf(FixedBudget(5), "model")).tokens == []


def test_a_withheld_candidate_is_judged_by_how_the_context_went_on():
    drafter = NgramDrafter()
    ahead = AheadOf(FixedBudget(5), "model")
    assert propose(drafter, WEAK, ahead).tokens == []
    before = drafter.calibration.estimate(True, 2, [0.5])
    propose(drafter, [*WEAK, 4, 7, 1, 2], ahead)  # the target went on as the withheld lookup said
    assert drafter.calibration.estimate(True, 2, [0.5])[0] > before[0]
    found = NgramDrafter().find([*WEAK, 4, 7, 1, 2], 5)  # what it found there: "... 4 7 1 2" -> 4
    assert found is not None and found.tokens[0] == 4
    doubted = drafter.calibration.estimate(True, found.bucket, found.raw)[0]
    assert drafter.judge([*WEAK, 4, 7, 1, 2, 8]) == 0  # but 8 came
    assert drafter.calibration.estimate(True, found.bucket, found.raw)[0] < doubted


def test_a_lookup_allowed_nothing_looks_up_now_and_then_and_still_learns(monkeypatch):
    """Held at K = 0 (the budget allows no proposal), a lookup searches only every SHADOW_EVERY
    cycles (the suffix search was the dearest part of a held cycle), and what it found then is
    still judged by how the context went on."""
    drafter = NgramDrafter()
    searched = []
    find = drafter.find
    monkeypatch.setattr(drafter, "find", lambda context, k: searched.append(k) or find(context, k))
    held, context, loop = FixedBudget(0), list(LOOP), [4, 5, 6, 1, 2, 3]
    for i in range(4 * SHADOW_EVERY):
        assert propose(drafter, context, held).tokens == []
        context.append(loop[i % len(loop)])  # the target goes on round the loop, a token a cycle
    assert len(searched) == 4  # every SHADOW_EVERY cycles, not every cycle
    assert drafter.calibration.first  # what it found was judged (nothing is kept before)
    assert propose(drafter, context).tokens  # allowed again: it proposes at once


def test_would_propose_answers_as_propose_would_and_learns_nothing():
    drafter, ahead = NgramDrafter(), AheadOf(FixedBudget(5), "model")
    assert propose(drafter, WEAK, ahead).tokens == []  # withheld: waits to be judged
    before = drafter.calibration.estimate(True, 2, [0.5])
    assert drafter.would_propose(LOOP, FixedBudget(5), GREEDY)
    assert not drafter.would_propose(WEAK, ahead, GREEDY)
    assert drafter.calibration.estimate(True, 2, [0.5]) == before
    propose(drafter, [*WEAK, 4, 7, 1, 2], ahead)  # the withheld candidate is still judged: right
    assert drafter.calibration.estimate(True, 2, [0.5])[0] > before[0]


def test_under_k_auto_a_lookup_proposes_what_its_estimates_support_not_autos_average_k():
    auto = AutoDraft()
    loop = [9, *range(1, 13), *range(1, 13)]  # 1..12 twice: a long, sure continuation
    assert auto.k("ngram") == 4  # nothing measured: K = auto's first guess
    sure = propose(NgramDrafter(), loop, CappedBudget(auto, 16))
    assert len(sure.tokens) > 4 and sure.tokens == list(range(1, len(sure.tokens) + 1))
    assert len(propose(NgramDrafter(), loop, FixedBudget(4)).tokens) == 4  # a fixed K still caps it


def test_wrong_lookups_stop_being_proposed_alone():
    drafter = NgramDrafter()
    context = list(LOOP)
    proposals = []
    for i in range(20):
        proposals.append(bool(propose(drafter, context).tokens))
        context = [*context, 1000 + i, 1, 2, 3]  # "1 2 3" is never followed by what followed it before
    assert proposals[0] and not any(proposals[3:])


def test_an_ungated_lookup_proposes_every_match_in_full():
    drafter = SuffixDrafter(gated=False)
    assert propose(drafter, LOOP, AheadOf(FixedBudget(5), "model")).tokens == [4, 5, 6, 1, 2]  # match 3: cap 24, K 5


# ----- past chats -----------------------------------------------------------------------------------


def test_past_chats_are_read_newest_first_within_the_budget_and_returned_oldest_first(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    for i in range(4):
        chat = store.new_chat()
        store.add_message(chat, "user", f"question {i} " + "x" * 100)
        store.add_message(chat, "assistant", f"answer {i}")
    store.new_chat()  # empty: nothing to learn
    chats = read_past_chats(store, max_chars=250)
    assert [c.messages[0].content[:10] for c in chats] == ["question 2", "question 3"]
    assert [m.role for m in chats[0].messages] == ["user", "assistant"]
    store.close()
    assert read_past_chats(store) == []  # a closed (unreadable) store gives no history, no error


class _FailingStore:
    def list_chats(self):
        raise sqlite3.OperationalError("database is locked")

    def messages(self, chat_id):
        raise AssertionError("not reached")


def test_an_unreadable_store_gives_no_history():
    assert read_past_chats(_FailingStore()) == []


class _Target:
    """Just what rendering and tokenizing needs (the real target is in test_lookup_drafters)."""

    chat_template = None  # the plain User/Assistant format
    bos_id, eos_id, add_bos = 1, 2, True

    def token_text(self, token: int) -> str:
        return {1: "<s>", 2: "</s>"}[token]

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        return [ord(c) for c in text]


def test_history_renders_each_chat_as_the_conversation_is_sent(tmp_path):
    store = ChatStore(tmp_path / "chats.db")
    chat = store.new_chat()
    store.add_message(chat, "user", "hi")
    store.add_message(chat, "assistant", "hello")
    source = history_source(read_past_chats(store))
    store.close()
    [tokens] = list(source(_Target()))
    sent = ChatFormat.from_model(_Target()).render([ChatMessage("user", "hi"), ChatMessage("assistant", "hello")],
                                                   add_generation_prompt=False)
    assert "hi" in sent and "hello" in sent
    assert tokens == [1, *map(ord, sent)]  # as the conversation is sent, with the model's one BOS


# ----- how long a proposal: tokens per pass cost, and the pass sizes K = auto asks to measure ---------


class Priced(BudgetDefaults):
    """K = auto's prices without K = auto: a pass of r rows costs `cost(r)` plain passes; a size
    to measure may be asked for (`ask`)."""

    def __init__(self, cost, ask: int | None = None, speedup: float | None = None) -> None:
        self.cost, self.ask, self.speedup, self.asked = cost, ask, speedup, []

    def k(self, source: str) -> int:
        return 31

    def p_min(self, source: str) -> float:
        return 0.0

    def limit(self, source: str) -> int:
        return 31

    def row_cost(self, rows: int) -> float | None:
        return self.cost(rows)

    def best_speedup(self, source: str) -> float | None:
        return self.speedup

    def measure_rows(self, longest: int) -> int | None:
        self.asked.append(longest)
        return self.ask


def straight(rows: int) -> float:
    return 1 + 0.25 * (rows - 1)


def knee(rows: int) -> float:
    """A quarter pass per row up to 20 rows, then 0.6 a row (a CPU's pass past its sweet spot)."""
    return straight(min(rows, 20)) + 0.6 * max(rows - 20, 0)


SURE = [1.0] * 31


def test_a_lookup_proposes_the_length_with_the_most_tokens_per_pass_cost():
    assert lookup_gate.best_length(SURE, Priced(straight), "", 31) == 31  # every row cheaper than the last
    assert lookup_gate.best_length(SURE, Priced(knee), "", 31) == 19  # 20 rows: 20/5.75; 32 rows: 32/12.95
    # Alone it must beat a plain step; ahead of a draft model, that model's speed-up.
    assert lookup_gate.best_length([0.1, 0.05], Priced(knee), "", 31) == 0
    assert lookup_gate.best_length(SURE, Priced(knee, speedup=3.0), "model", 31) == 19
    assert lookup_gate.best_length(SURE, Priced(knee, speedup=3.6), "model", 31) == 0  # 20/5.75 < 3.6
    # Nothing measured yet: the whole run, weighed against the fixed thresholds.
    assert lookup_gate.best_length(SURE, FixedBudget(31), "", 31) == 31


def test_a_lookup_verifies_the_size_k_auto_asks_for_when_it_costs_little():
    assert lookup_gate.measured_length(SURE, Priced(knee, ask=22), 19) == 21  # 22 rows: 91 % of 20's rate
    assert lookup_gate.measured_length(SURE, Priced(knee, ask=2), 19) == 19  # 2 rows: 47 %, not worth it
    assert lookup_gate.measured_length(SURE[:10], Priced(knee, ask=22), 10) == 10  # more rows than it trusts
    assert lookup_gate.measured_length(SURE, Priced(knee), 19) == 19  # nothing asked


def test_a_sure_run_is_cut_at_the_fastest_pass_size_and_sizes_between_are_measured():
    loop = [99, *range(1, 41), *range(1, 41)]  # 1..40 twice: a long, sure continuation
    trained = NgramDrafter()
    found = trained.find(loop, 31)
    assert found is not None and len(found.tokens) == 31
    for _ in range(40):  # the target has always gone on as this kind of match said
        trained.calibration.observe(True, found.bucket, found.raw, accepted=31)

    def proposed(budget) -> list[int]:
        drafter = NgramDrafter()
        drafter.calibration = trained.calibration
        return propose(drafter, loop, budget).tokens

    assert len(proposed(FixedBudget(31))) == 31
    assert len(proposed(Priced(straight))) == 31
    budget = Priced(knee)
    assert proposed(budget) == list(range(1, 20))
    assert budget.asked == [32]  # which size K = auto wants measured: asked once, when proposing
    assert len(proposed(Priced(knee, ask=22))) == 21


def test_k_auto_asks_now_and_then_for_the_middle_of_the_widest_gap_between_measured_sizes():
    auto = AutoDraft()
    for rows in (1, 2, 3, 4, 5, 6, 7, 32):
        auto.verify.add(rows, 0.1 * rows)
    assert auto.verify.unmeasured(32) == 19
    assert auto.verify.unmeasured(8) is None  # 1..8: close enough
    assert auto.verify.unmeasured(20) == 13  # up to the longest the lookup trusts, measured or not
    asked = [auto.measure_rows(32) for _ in range(2 * MEASURE_EVERY)]
    assert asked == [None] * (MEASURE_EVERY - 1) + [19] + [None] * (MEASURE_EVERY - 1) + [19]
    auto.verify.add(19, 1.9)
    assert auto.verify.unmeasured(32) == 25  # (19, 32) is now the widest
    for rows in (10, 13, 16, 22, 25, 28):
        auto.verify.add(rows, 0.1 * rows)
    assert auto.verify.unmeasured(32) is None
