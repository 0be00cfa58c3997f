"""The K budget as a declared interface (no llama.cpp needed): every question a drafter may ask is
in the `Budget` protocol, answered by default where a budget has nothing to say, and passed on by
every wrapper to the budget it wraps, unless the wrapper changes that answer."""

from __future__ import annotations

import pytest
from autodraft_cycles import feed_cycles

from spectui.engine.drafters.chain import AheadOf, Behind
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.planning.autodraft import AutoDraft
from spectui.engine.step.drafter import Budget, BudgetDefaults, BudgetView, CappedBudget, FixedBudget
from spectui.engine.step.draftplan import Calibration, DraftPlan

QUESTIONS = sorted(name for name in vars(Budget) if not name.startswith("_"))
"""What a drafter may ask of a budget, read from the protocol itself."""
PLAN = DraftPlan(max_tokens=12, row_value=0.1, draft_value=0.2, mean_acceptance=0.7, max_nodes=20, max_leaves=2,
                 calibration=Calibration())


class Answers(BudgetDefaults):
    """A budget whose every answer is distinct, recording who asked what."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def k(self, source: str) -> int:
        self.asked.append("k")
        return 9

    def p_min(self, source: str) -> float:
        self.asked.append("p_min")
        return 0.25

    def limit(self, source: str) -> int:
        self.asked.append("limit")
        return 20

    def plan(self, source: str) -> DraftPlan | None:
        self.asked.append("plan")
        return PLAN

    @property
    def fallback(self) -> str:
        self.asked.append("fallback")
        return "inner-fallback"

    def hands_over(self, context, drafted) -> bool:
        self.asked.append("hands_over")
        return True

    def row_cost(self, rows: int) -> float | None:
        self.asked.append("row_cost")
        return 1.5

    def best_speedup(self, source: str) -> float | None:
        self.asked.append("best_speedup")
        return 1.8

    def probing(self, source: str) -> bool:
        self.asked.append("probing")
        return True

    def measure_rows(self, longest: int) -> int | None:
        self.asked.append("measure_rows")
        return 7


def ask(budget: Budget, question: str) -> object:
    value = getattr(budget, question)  # the test walks the protocol's names; drafters call them
    if question == "fallback":
        return value
    if question == "hands_over":
        return value([1, 2], [3])
    if question in ("row_cost", "measure_rows"):
        return value(4)
    return value("model")


def test_the_protocol_declares_every_question_and_the_defaults_answer_the_optional_ones():
    assert QUESTIONS == ["best_speedup", "fallback", "hands_over", "k", "limit", "measure_rows", "p_min", "plan",
                         "probing", "row_cost"]
    fixed = FixedBudget(3)
    assert [ask(fixed, q) for q in QUESTIONS] == [None, "", False, 3, 3, None, 0.0, None, False, None]


@pytest.mark.parametrize("question", QUESTIONS)
def test_a_plain_view_passes_every_question_to_the_budget_it_wraps(question):
    assert question in vars(BudgetView), "a view must answer each question itself, not inherit a default"
    inner = Answers()
    assert ask(BudgetView(inner), question) == ask(Answers(), question)
    assert inner.asked == [question]


def test_the_cycle_budget_caps_what_it_passes_on_and_reports_what_it_gave():
    capped = CappedBudget(Answers(), cap=4)
    assert capped.k("model") == 4 and capped.limit("ngram") == 4  # 9 and 20, capped
    plan = capped.plan("model")
    assert plan is not None and (plan.max_tokens, plan.max_nodes, plan.row_value) == (4, 4, PLAN.row_value)
    assert (capped.p_min("model"), capped.fallback, capped.row_cost(4), capped.best_speedup("model")) == \
        (0.25, "inner-fallback", 1.5, 1.8)
    assert capped.given_to("model") == 4 and capped.given_to("suffix") == 4  # asked for none: the most given
    assert CappedBudget(FixedBudget(2), cap=8).given_to("model") == 0  # nobody asked
    assert CappedBudget(FixedBudget(2), cap=0).k("model") == 0


def test_a_chain_member_ahead_names_its_fallback_and_one_behind_asks_the_lookups():
    auto = AutoDraft()
    feed_cycles(auto, accept_rate=0.9, draft_s=0.002, verify_s=0.03)
    cycle = CappedBudget(auto, 16)
    ahead = AheadOf(cycle, "model")
    assert ahead.fallback == "model" and not ahead.hands_over([1], [2])
    assert ahead.row_cost(6) == pytest.approx(auto.verify_cost(6) / auto.verify_cost(1))
    assert ahead.best_speedup("model") == pytest.approx(max(auto.expected_speedup("model", n) for n in range(1, 17)))
    assert ahead.best_speedup("suffix") is None  # not measured

    class EndsWith:
        def __init__(self) -> None:
            self.seen: list[tuple[list[int], str]] = []

        def would_propose(self, context, budget, cfg) -> bool:
            self.seen.append((list(context), budget.fallback))
            return context[-1] == 7

    lookup = EndsWith()
    behind = Behind(cycle, [lookup], "model", SamplingConfig(temperature=0.0))
    assert behind.fallback == "" and behind.plan("model") == cycle.plan("model")
    assert not behind.hands_over([1, 2], [3]) and behind.hands_over([1, 2], [3, 7])
    assert lookup.seen == [([1, 2, 3], "model"), ([1, 2, 3, 7], "model")]  # the lookup sees the model behind it
