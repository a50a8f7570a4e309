"""STR-003 broken: while RECOVERING the view still shows the summary.

The renderer (and the budget, consistently) hides the summary and pending turns when
``health is DEGRADED`` rather than when the memory is DEGRADED *or RECOVERING*: while a
recovery attempt is in flight, ``get_llm_context()`` shows
``{"summary": <last good summary>, "recent_turns": [...]}``, a shape section 0 gives only
to HEALTHY/RETRY. DEGRADED itself renders recent turns only.
"""

from __future__ import annotations

from typing import Any

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.types import MemoryHealth

from . import mutant_provider
from ._util import with_budget

BREAKS = "STR-003"
COLLATERAL: dict[str, str] = {}


def _shows_summary(config: Any, state: MemoryState) -> bool:
    # MUTATION: RECOVERING is not treated as degraded by the view
    return config.strategy == "rolling_summary" and state.health.state is not MemoryHealth.DEGRADED


class RecoveringShowsBudget(Budget):
    __slots__ = ()

    def _shows_summary(self, state: MemoryState) -> bool:
        return _shows_summary(self.config, state)


class RecoveringShowsMemory(with_budget(RecoveringShowsBudget)):  # type: ignore[misc]
    def _view(self) -> dict[str, Any]:
        strategy, state = self._config.strategy, self._state
        if strategy == "none":
            return {}
        view: dict[str, Any] = {"recent_turns": [e.fresh() for e in state.recent]}
        if _shows_summary(self._config, state):
            visible = state.visible_pending
            if visible:
                view["pending_turns"] = [e.fresh() for e in visible]
            if state.summary:
                view["summary"] = state.summary
        return {"conversation_memory": view}


provider = mutant_provider("str003-recovering-view-shows-summary", RecoveringShowsMemory)
