"""WM-006 broken: budget trimming deletes the oldest pending turns instead of hiding them.

A :class:`~reference_impl.budget.Budget` subclass, injected into the memory, deletes the
pending turns it hid to fit ``total_max_tokens``; they never reach the summarizer.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-006"
COLLATERAL: dict[str, str] = {}


class DeletingBudget(Budget):
    __slots__ = ()

    def enforce(self, state: MemoryState) -> None:
        super().enforce(state)
        if state.visible_from:
            # MUTATION: the hidden pending turns are deleted, not kept for the summarizer
            del state.pending[: state.visible_from]
            state.visible_from = 0


class DeletingBudgetMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = DeletingBudget.for_config(self._config)


provider = mutant_provider("wm006-budget-deletes-pending", DeletingBudgetMemory)
