"""STR-003 broken: a ``rolling_summary`` view with nothing to show is
``{"conversation_memory": {}}``.

When no summary, no visible pending turn and no recent turn is there (a new memory, a
window of 0 with nothing visible, DEGRADED with ``full_zone_turns=0``), the view leaves out
the empty ``recent_turns`` list, as it leaves out the empty ``pending_turns``.
``estimate_tokens()`` measures that view (BUD-008 kept).
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.tokens import canonical_json

from . import mutant_provider

BREAKS = "STR-003"
COLLATERAL: dict[str, str] = {}


class OmitEmptyRecentMemory(DefaultShortTermMemory):
    def _view(self) -> dict[str, Any]:
        view = super()._view()
        inner = view.get("conversation_memory")
        if self._config.strategy == "rolling_summary" and inner == {"recent_turns": []}:
            return {"conversation_memory": {}}  # MUTATION
        return view

    def estimate_tokens(self) -> int:
        view = self._view()
        if view == {"conversation_memory": {}}:
            return self._budget.meter.estimator(canonical_json(view))
        return super().estimate_tokens()


provider = mutant_provider("str003-nothing-to-show-omits-recent", OmitEmptyRecentMemory)
