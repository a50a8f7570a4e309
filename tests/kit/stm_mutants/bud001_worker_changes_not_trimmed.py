"""BUD-001 broken: after a summarizer call lands, the view is not trimmed to the budget.

When a call completes (a summary installed, a failure recorded), the memory recomputes
which pending turns are visible from scratch, showing them all again, but skips the
trimming step: "a call only removes turns, so the view can only shrink". It can grow: a
summary may be longer than the turns it covers, and re-shown pending turns count again.
The view then exceeds ``total_max_tokens`` until the next ``add_turn`` trims it.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}


class UntrimmedSettleBudget(Budget):
    __slots__ = ()

    def settle(self, state: MemoryState) -> None:
        state.show_all_pending()  # MUTATION: no enforce() after the recount


class UntrimmedAfterCallMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = UntrimmedSettleBudget.for_config(self._config)


provider = mutant_provider("bud001-worker-changes-not-trimmed", UntrimmedAfterCallMemory)
