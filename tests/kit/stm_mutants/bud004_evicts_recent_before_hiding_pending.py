"""BUD-004 broken: over budget, the oldest recent turns are evicted before pending turns
are hidden.

``truncate_oldest`` trims in the wrong order: recent turns go first (to pending, where
they are shown in place of older pending turns), and pending turns are hidden only once
recent is empty. The view fits the budget either way; what it holds does not.
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-004"
COLLATERAL: dict[str, str] = {}


class RecentFirstBudget(Budget):
    __slots__ = ()

    def enforce(self, state: MemoryState) -> None:
        if self.limit and self.config.budget.overflow_policy == "truncate_oldest":
            while state.recent and not self.fits(state):
                watermark.evict_oldest_recent(state, self.config)  # MUTATION: recent first
        super().enforce(state)


class RecentFirstMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = RecentFirstBudget.for_config(self._config)


provider = mutant_provider("bud004-evicts-recent-before-hiding-pending", RecentFirstMemory)
