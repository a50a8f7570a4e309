"""BUD-001 broken: the budget measures the inner mapping, not the whole view.

Trimming decides whether the view fits by estimating the canonical JSON of
``view["conversation_memory"]``, without the ``{"conversation_memory": ...}`` wrapper that
``get_llm_context()`` returns and ``estimate_tokens()`` counts. A view within a few tokens
of ``total_max_tokens`` is left over it.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState, render_view
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json

from . import mutant_provider

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}


class InnerViewBudget(Budget):
    __slots__ = ()

    def fits(self, state: MemoryState) -> bool:
        if not self.limit:
            return True
        view = render_view(self.config.strategy, state)
        # MUTATION: the wrapper around the inner mapping is left out of the measure
        inner = view.get("conversation_memory", {})
        return self.meter.estimator(canonical_json(inner)) <= self.limit


class InnerViewBudgetMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._budget = InnerViewBudget.for_config(self._config)


provider = mutant_provider("bud001-fits-measures-inner-view", InnerViewBudgetMemory)
