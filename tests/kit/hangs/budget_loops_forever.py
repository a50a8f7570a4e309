"""BUD-001 broken by a synchronous infinite loop: trimming never evicts a recent turn.

When the view is over ``total_max_tokens`` and only recent turns can go, the budget loop
looks at the oldest recent turn and forgets to evict it, so ``add_turn`` never returns and
the event loop is blocked (no ``await`` in the loop: nothing can cancel it). The loop
sleeps a millisecond a round (synchronously, as a blocking client call would): it blocks
the loop as a spinning one does without burning a core for the whole run. The kit's
interruption of a pure spin is tested on its own (``tests/kit/test_deadline.py``).
"""

from __future__ import annotations

import time
from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from stm_conformance._deadline import BLOCKED

from . import hang_provider

FAILS = "BUD-001"
REASON = BLOCKED
CHECK = "test_truncation_stays_within_budget"
WALL_S = 180


class LoopingBudget(Budget):
    def enforce(self, state: MemoryState) -> None:
        if not self.limit or self.config.budget.overflow_policy == "error":
            return
        first_summary = self.config.budget.overflow_policy == "truncate_summary"
        while not self.fits(state):
            if first_summary and state.summary and self._shows_summary(state):
                self._shorten_summary(state)
            elif state.visible_from < len(state.pending) and self._shows_summary(state):
                state.hide_oldest_visible()
            elif state.recent:
                oldest = state.recent[0]  # MUTATION: looked at, never evicted
                del oldest
                time.sleep(0.001)
            elif state.summary and self._shows_summary(state):
                self._shorten_summary(state)


class LoopingMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = LoopingBudget.for_config(self._config)


provider = hang_provider("budget-loops-forever", LoopingMemory)
