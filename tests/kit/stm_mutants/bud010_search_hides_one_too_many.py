"""BUD-010 broken: when more than one pending turn must be hidden at once, one too many is.

The budget's search for how many of the oldest pending turns to hide (galloping, then
bisecting) ends one past the answer, so the visible run is one turn shorter than the
longest run of newest pending turns that fits. Hiding a single turn, the usual case after
``add_turn``, is right; a settle after a load or a summary install, or a turn too large
for one hidden turn to make room, shows it.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-010"
COLLATERAL: dict[str, str] = {}


class OneTooManyBudget(Budget):
    __slots__ = ()

    def _hide_pending(self, state: MemoryState) -> bool:
        start = state.visible_from
        fits = super()._hide_pending(state)
        hidden_to, end = state.visible_from, len(state.pending)
        if fits and hidden_to - start > 1 and hidden_to < end:
            state.show_pending_from(hidden_to + 1)  # MUTATION: the search ends one past it
            return hidden_to + 1 < end
        return fits


class OneTooManyMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = OneTooManyBudget.for_config(self._config)


provider = mutant_provider("bud010-search-hides-one-too-many", OneTooManyMemory)
