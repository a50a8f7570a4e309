"""BUD-001 broken: the truncation strategy trims by the default len//4+1 count of the view,
whatever token_estimator is configured; estimate_tokens() still uses the configured one.
With an estimator heavier than the default the view stays over total_max_tokens."""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import TokenMeter

from . import mutant_provider

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}


class LengthTrimBudget(Budget):
    __slots__ = ()

    def enforce(self, state: MemoryState) -> None:
        if self.config.strategy != "truncation" or not self.limit:
            super().enforce(state)
            return
        if self.config.budget.overflow_policy == "error":
            return
        fast = Budget(self.config, TokenMeter.for_estimator(None))  # MUTATION: default estimator
        for entry in state.recent:
            entry.measure(len)
        while state.recent and not fast.fits(state):
            state.pop_recent()


class LengthTrimMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = LengthTrimBudget.for_config(self._config)


provider = mutant_provider("bud001-truncation-trims-by-length", LengthTrimMemory)
