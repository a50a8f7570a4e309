"""BUD-009 broken: an unsatisfiable budget is refused with ``MemoryBudgetExceeded``.

The satisfiability check at construction measures the empty view exactly as the reference
does, but raises the library's budget error, ``MemoryBudgetExceeded`` (a
``RuntimeError``), "since it is a budget that is exceeded". The spec requires a
``ValueError`` (bad input): a caller validating configuration with
``except ValueError`` lets it through.
"""

from __future__ import annotations

from typing import Any

from reference_impl import memory as memory_module
from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryBudgetExceeded

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-009"
COLLATERAL: dict[str, str] = {}


class BudgetErrorBudget(Budget):
    __slots__ = ()

    def check_satisfiable(self) -> None:
        try:
            super().check_satisfiable()
        except ValueError as exc:
            raise MemoryBudgetExceeded(str(exc)) from None  # MUTATION: not a ValueError


class BudgetErrorMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", BudgetErrorBudget):
            super().__init__(**kwargs)


provider = mutant_provider("bud009-refused-with-budget-exceeded", BudgetErrorMemory)
