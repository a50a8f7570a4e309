"""BUD-007 broken: the size of a summary is estimator(summary) even for "" (1 token by the
default estimator), where the spec says an empty summary has size 0. With
summary_max_tokens=0 every (empty) summary is treated as a failed call."""

from __future__ import annotations

from typing import Any

from reference_impl import memory as memory_module
from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-007"
COLLATERAL: dict[str, str] = {}


class NoEmptyCaseBudget(Budget):
    __slots__ = ()

    def summary_fits(self, summary: str) -> bool:
        # MUTATION: "" is measured by the estimator, not as size 0
        return self.meter.estimator(summary) <= self.config.budget.summary_max_tokens


class NoEmptyCaseMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", NoEmptyCaseBudget):
            super().__init__(**kwargs)


provider = mutant_provider("bud007-empty-summary-sized-one", NoEmptyCaseMemory)
