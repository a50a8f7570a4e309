"""BUD-009 broken: a budget that not even the empty view fits is accepted.

The memory's budget is built without the satisfiability check, so a ``total_max_tokens``
below the empty view's size is only discovered when the first turn is added.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ShortTermMemoryConfig

from . import mutant_provider

BREAKS = "BUD-009"
COLLATERAL: dict[str, str] = {}


class UncheckedBudgetMemory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        unlimited = dataclasses.replace(
            config, budget=dataclasses.replace(config.budget, total_max_tokens=0)
        )
        super().__init__(config=unlimited, **kwargs)
        self._config = config
        # MUTATION: Budget(...) instead of Budget.for_config(...): check_satisfiable skipped
        self._budget = Budget(config, self._budget.meter)


provider = mutant_provider("bud009-unsatisfiable-budget-accepted", UncheckedBudgetMemory)
