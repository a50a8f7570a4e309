"""BUD-005 broken: under ``truncate_summary`` an over-budget summary is dropped whole.

"A cut summary reads badly": instead of its longest tail that fits, the summary goes
entirely, and the room it held is left empty.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-005"
COLLATERAL: dict[str, str] = {}


class DropWholeBudget(Budget):
    __slots__ = ()

    def _shorten_summary(self, state: MemoryState) -> None:
        if self.config.budget.overflow_policy == "truncate_summary":
            state.set_summary("")  # MUTATION: all or nothing
            return
        super()._shorten_summary(state)


class DropWholeMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = DropWholeBudget.for_config(self._config)


provider = mutant_provider("bud005-summary-dropped-whole", DropWholeMemory)
