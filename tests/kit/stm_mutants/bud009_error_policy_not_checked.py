"""BUD-009 broken: the satisfiability check is skipped under overflow_policy="error"
("the error policy refuses turns anyway"), so an unsatisfiable budget is accepted there."""

from __future__ import annotations

from typing import Any

from reference_impl import memory as memory_module
from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-009"
COLLATERAL: dict[str, str] = {}


class LenientBudget(Budget):
    __slots__ = ()

    def check_satisfiable(self) -> None:
        if self.config.budget.overflow_policy == "error":
            return  # MUTATION: "error raises on add_turn anyway"
        super().check_satisfiable()


class LenientMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", LenientBudget):
            super().__init__(**kwargs)


provider = mutant_provider("bud009-error-policy-not-checked", LenientMemory)
