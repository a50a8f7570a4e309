"""BUD-004 broken: under ``truncation`` the token budget drops the newest turn.

When the view is over ``total_max_tokens`` and no pending turn is left to hide, the recent
turn dropped is the newest one (``deque.pop()``) instead of the oldest (``popleft()``), so
a turn too large to fit next to the window is discarded as it is added. ``rolling_summary``
memories evict the oldest turn, as the reference does.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-004"
COLLATERAL: dict[str, str] = {}


class NewestFirstBudget(Budget):
    __slots__ = ()

    def enforce(self, state: MemoryState) -> None:
        if self.config.strategy != "truncation" or not self.limit:
            super().enforce(state)
            return
        if self.config.budget.overflow_policy == "error":
            return
        while state.recent and not self.fits(state):
            entry = state.recent.pop()  # MUTATION: pop() where popleft() was meant
            state.recent_size -= entry.size


class NewestFirstMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = NewestFirstBudget.for_config(self._config)


provider = mutant_provider("bud004-truncation-drops-newest", NewestFirstMemory)
