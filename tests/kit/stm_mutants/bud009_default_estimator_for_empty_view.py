"""BUD-009 broken: the satisfiability test measures the empty view with the default estimator.

At construction the backend checks the budget against the empty view measured by
``default_token_estimator`` (``len // 4 + 1``), whatever ``token_estimator`` is
configured. With an estimator that counts more than the default, a budget the empty view
exceeds is accepted; with one that counts less, a budget the empty view fits is refused.
With the default estimator it behaves as the reference.
"""

from __future__ import annotations

from typing import Any

import reference_impl.memory as memory_module
from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import TokenMeter

from . import mutant_provider

BREAKS = "BUD-009"
COLLATERAL: dict[str, str] = {}


class DefaultMeteredCheckBudget(Budget):
    __slots__ = ()

    def check_satisfiable(self) -> None:
        # MUTATION: measured with the default estimator, whatever is configured
        Budget(self.config, TokenMeter.for_estimator(None)).check_satisfiable()


class LaxBudgetMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        original = memory_module.Budget
        memory_module.Budget = DefaultMeteredCheckBudget
        try:
            super().__init__(**kwargs)
        finally:
            memory_module.Budget = original


provider = mutant_provider("bud009-default-estimator-for-empty-view", LaxBudgetMemory)
