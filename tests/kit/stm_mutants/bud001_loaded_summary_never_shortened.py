"""BUD-001 broken: loading a state never rewrites its summary to fit total_max_tokens
("stored text is sacred": only summary_max_tokens clipping, BUD-002, is applied). The
budget hides pending turns and evicts recent ones as usual, but if the summary alone is
still over total_max_tokens with the view's keys, the loaded view stays over the budget.
Summaries installed at run time, and loads under truncate_summary, are shortened as by
the reference (policy truncate_oldest only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl import memory as memory_module
from reference_impl import watermark
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}

_LOADING = [False]


class LoadKeepsSummaryBudget(Budget):
    __slots__ = ()

    def enforce(self, state: MemoryState) -> None:
        if not _LOADING[0] or self.config.budget.overflow_policy != "truncate_oldest":
            super().enforce(state)
            return
        if not self.limit or self.config.budget.overflow_policy == "error":
            return
        while not self.fits(state):
            if state.visible_from < len(state.pending) and self._shows_summary(state):
                if self._hide_pending(state):
                    return
            elif state.recent:
                watermark.evict_oldest_recent(state, self.config)
            else:
                return  # MUTATION: the loaded summary is never shortened


class LoadKeepsSummaryMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", LoadKeepsSummaryBudget):
            super().__init__(**kwargs)

    def from_dict(self, state: Mapping[str, Any]) -> None:
        _LOADING[0] = True
        try:
            super().from_dict(state)
        finally:
            _LOADING[0] = False

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        _LOADING[0] = True
        try:
            await super().afrom_dict(state)
        finally:
            _LOADING[0] = False


provider = mutant_provider("bud001-loaded-summary-never-shortened", LoadKeepsSummaryMemory)
