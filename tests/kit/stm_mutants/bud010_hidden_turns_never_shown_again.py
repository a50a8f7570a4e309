"""BUD-010 broken: a pending turn once hidden by the budget stays hidden for good.

The visible run of pending turns only ever shrinks: after a summary covers older turns,
or a reload, the budget trims from where it left off instead of from scratch, so turns
it hid earlier stay out of the view although they fit again. The view then depends on
the history of the memory, not on its state: a restore or a replica shows more.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-010"
COLLATERAL: dict[str, str] = {}


class StickyHidingBudget(Budget):
    __slots__ = ()

    def settle(self, state: MemoryState) -> None:
        hidden = min(state.visible_from, len(state.pending))
        state.show_all_pending()
        state.show_pending_from(hidden)  # MUTATION: as many turns as before stay hidden
        self.enforce(state)


class StickyHidingMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = StickyHidingBudget.for_config(self._config)


provider = mutant_provider("bud010-hidden-turns-never-shown-again", StickyHidingMemory)
