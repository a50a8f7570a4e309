"""WM-006 broken: ``to_dict()`` writes only the pending turns the view shows.

The state is serialised from what the budget leaves visible: pending turns hidden to fit
``total_max_tokens`` are not written. A restored memory looks the same (those turns were
not shown), but the hidden turns are gone: no summarizer call is ever sent them. Budget
trimming may hide pending turns, never delete them. States without hidden pending turns
are written as by the reference.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-006"
COLLATERAL: dict[str, str] = {}


class VisibleOnlyStateMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        hidden = self._state.visible_from
        if hidden and not self._state.health.degraded:
            data["pending"] = data["pending"][hidden:]  # MUTATION: hidden turns not written
        return data


provider = mutant_provider("wm006-to-dict-writes-visible-pending-only", VisibleOnlyStateMemory)
