"""BUD-005 broken: ``truncate_summary`` hides pending turns before shortening the summary.

In the trimming loop the branch that hides the oldest visible pending turn comes before the
one that shortens the summary first, so under ``truncate_summary`` pending turns are hidden
while the summary is kept whole; the summary is shortened only once no pending turn is
visible (still before any recent turn is evicted).
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-005"
COLLATERAL: dict[str, str] = {}


class PendingFirstBudget(Budget):
    __slots__ = ()

    def enforce(self, state: MemoryState) -> None:
        if not self.limit or self.config.budget.overflow_policy == "error":
            return
        first_summary = self.config.budget.overflow_policy == "truncate_summary"
        while not self.fits(state):
            # MUTATION: hiding pending turns is tried before shortening the summary
            if state.visible_from < len(state.pending) and self._shows_summary(state):
                state.hide_oldest_visible()
            elif first_summary and state.summary and self._shows_summary(state):
                self._shorten_summary(state)
            elif state.recent:
                watermark.evict_oldest_recent(state, self.config)
            elif state.summary and self._shows_summary(state):
                self._shorten_summary(state)
            else:
                raise AssertionError("empty view exceeds the budget")


class PendingFirstMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = PendingFirstBudget.for_config(self._config)


provider = mutant_provider("bud005-pending-hidden-before-summary", PendingFirstMemory)
