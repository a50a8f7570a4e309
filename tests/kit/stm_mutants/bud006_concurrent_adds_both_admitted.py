"""BUD-006 broken: under ``overflow_policy="error"`` the fit is checked before an await.

``add_turn`` measures the new view and refuses a turn that does not fit, as the
reference does, but then yields to the event loop (the turn's size "measured off the
loop") before storing it, without checking again. Two ``add_turn`` calls made together
each find room for their own turn in the view as it was, and both are stored: the view
ends over ``total_max_tokens`` and neither call raised. Sequential calls behave exactly
as the reference's. Spec, BUD-006: "Policy ``error``: ``add_turn`` MUST raise
``MemoryBudgetExceeded`` when the resulting view would exceed ``total_max_tokens``".
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.types import ConversationTurn, MemoryBudgetExceeded

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}

_checked: contextvars.ContextVar[bool] = contextvars.ContextVar("bud006-checked", default=False)


class CheckedOnceBudget(Budget):
    __slots__ = ()

    def fits_after_add(self, state: Any, entry: Any) -> bool:
        if _checked.get():
            return True  # checked before the await: not again
        return super().fits_after_add(state, entry)


class CheckThenYieldMemory(with_budget(CheckedOnceBudget)):  # type: ignore[misc]
    async def add_turn(self, turn: ConversationTurn) -> None:
        config = self._config
        if self._closed or config.strategy == "none" or config.budget.overflow_policy != "error":
            return await super().add_turn(turn)
        check_turn(turn)
        state = self._state
        entry = Entry.make(
            state.next_seq,
            turn,
            include_digest=config.include_trajectory_digest,
            size_of=self._budget.meter.size_of,
        )
        if not self._budget.fits_after_add(state, entry):
            raise MemoryBudgetExceeded(
                f"turn would take the memory over total_max_tokens={config.budget.total_max_tokens}"
            )
        await asyncio.sleep(0)  # MUTATION: yields between the check and the store
        token = _checked.set(True)
        try:
            await super().add_turn(turn)
        finally:
            _checked.reset(token)


provider = mutant_provider("bud006-concurrent-adds-both-admitted", CheckThenYieldMemory)
