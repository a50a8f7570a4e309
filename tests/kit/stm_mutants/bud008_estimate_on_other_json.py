"""BUD-008 broken: ``estimate_tokens()`` measures differently formatted JSON.

The estimator is applied to ``json.dumps(view)`` with Python's default formatting (spaces
after separators, ASCII escapes, insertion order) instead of the canonical JSON the spec
defines, so the number a caller budgets with is not the number of what it sends.
"""

from __future__ import annotations

import json

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import default_token_estimator

from . import mutant_provider

BREAKS = "BUD-008"
COLLATERAL = {
    "BUD-001": "co-marked on test_*_stays_within_budget, which checks BUD-008 first",
    "BUD-002": "co-marked on test_rolling_summary_stays_within_budget",
    "BUD-003": "co-marked on test_*_stays_within_budget",
}
SUITE_FILES = ("test_budget.py",)
# Every budget check asserts BUD-008 first through the suite's shared invariant helper and
# is reported under its own IDs (BUD-004, BUD-005, BUD-010, ...); the run is narrowed to
# the checks marked BUD-008.
SELECT = "estimate_uses_the_configured_estimator or stays_within_budget"


class OtherJsonEstimateMemory(DefaultShortTermMemory):
    def estimate_tokens(self) -> int:
        estimator = self._config.token_estimator or default_token_estimator
        return estimator(json.dumps(self._view()))  # MUTATION: not the canonical JSON


provider = mutant_provider("bud008-estimate-on-other-json", OtherJsonEstimateMemory)
