"""STR-003 broken: with turns pending but all hidden by the budget, the view has
``"pending_turns": []``.

Section 0 of the spec puts ``pending_turns`` in the view only when at least one pending
turn is visible. The budget measures exactly the view shown, empty list included, so
``estimate_tokens()`` and the token limit stay right; only the shape is wrong (and the
trimming that follows from the extra characters).
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState, render_view
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json

from . import mutant_provider

BREAKS = "STR-003"
COLLATERAL: dict[str, str] = {}


def _view(strategy: str, state: MemoryState) -> dict[str, Any]:
    view = render_view(strategy, state)
    if (
        strategy == "rolling_summary"
        and not state.health.degraded
        and state.pending
        and not state.visible_pending
    ):
        view["conversation_memory"]["pending_turns"] = []  # MUTATION: present though empty
    return view


class ExactBudget(Budget):
    def tokens(self, state: MemoryState) -> int:
        if not state.metered:
            self.start_metering(state)
        return self.meter.estimator(canonical_json(_view(self.config.strategy, state)))


class EmptyPendingMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = ExactBudget.for_config(self._config)
        self._size_of = self._budget.meter.size_of

    def _view(self) -> dict[str, Any]:
        return _view(self._config.strategy, self._state)


provider = mutant_provider("str003-empty-pending-list-shown", EmptyPendingMemory)
