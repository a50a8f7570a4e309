"""BUD-009 broken: only a ``truncation`` memory checks that its budget fits the empty
view; a ``rolling_summary`` memory accepts any ``total_max_tokens``.

The guard meant to skip strategy ``none`` (whose view ``{}`` fits any budget) was written
``if strategy != "truncation": return``. A ``rolling_summary`` memory built with
``total_max_tokens`` under the empty view's size (``{"conversation_memory":
{"recent_turns":[]}}``, 12 tokens by the default estimator) is accepted and fails only
when a turn comes. Spec, BUD-009: "A memory MUST reject at construction, with
``ValueError``, a budget under which even the empty view exceeds ``total_max_tokens``."
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


class TruncationOnlyBudget(Budget):
    __slots__ = ()

    def check_satisfiable(self) -> None:
        if self.config.strategy != "truncation":
            return  # MUTATION: meant to skip strategy none only
        super().check_satisfiable()


class Memory(DefaultShortTermMemory):
    def __init__(self, *, config: ShortTermMemoryConfig, **kwargs: Any) -> None:
        unlimited = dataclasses.replace(
            config, budget=dataclasses.replace(config.budget, total_max_tokens=0)
        )
        super().__init__(config=unlimited, **kwargs)
        self._config = config
        self._budget = TruncationOnlyBudget.for_config(config)
        self._size_of = self._budget.meter.size_of
        self._state.metered = not self._budget.defers_measuring


provider = mutant_provider("bud009-rolling-summary-budget-unchecked", Memory)
