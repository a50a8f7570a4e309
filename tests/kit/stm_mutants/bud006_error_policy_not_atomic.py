"""BUD-006 broken: under ``overflow_policy="error"`` the refused turn is already stored.

An injected :class:`~reference_impl.budget.Budget` checks the budget only *after* the turn
was admitted and raises ``MemoryBudgetExceeded`` from there: the call raises, but the view,
the token count and ``to_dict()`` already contain the refused turn.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import Entry, MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryBudgetExceeded

from . import mutant_provider

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}


class LateCheckBudget(Budget):
    __slots__ = ()

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        return True  # MUTATION: no check before the turn is admitted ...

    def enforce(self, state: MemoryState) -> None:
        super().enforce(state)
        if self.config.budget.overflow_policy == "error" and not self.fits(state):
            # ... but one after it, when the state has already changed
            raise MemoryBudgetExceeded("turn does not fit total_max_tokens")


class NonAtomicErrorMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = LateCheckBudget.for_config(self._config)


provider = mutant_provider("bud006-error-policy-not-atomic", NonAtomicErrorMemory)
