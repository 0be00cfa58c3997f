"""A drafting budget for token trees in tests (`test_tree_drafters`, `test_tool_grammar`): a fixed
K whose plan makes rows nearly free, so a drafter proposes candidates wherever it is unsure."""

from __future__ import annotations

from dataclasses import dataclass

from spectui.engine.step.drafter import FixedBudget
from spectui.engine.step.draftplan import Calibration, DraftPlan


@dataclass(frozen=True)
class TreeBudget(FixedBudget):
    """A fixed K with a plan that makes rows nearly free: candidates wherever the draft is unsure."""

    leaves: int = 4
    row_value: float = 0.03

    def plan(self, source: str) -> DraftPlan:
        return DraftPlan(max_tokens=self.fixed_k, row_value=self.row_value, draft_value=0.0, mean_acceptance=1.0,
                         max_nodes=31, max_leaves=self.leaves, calibration=Calibration())
