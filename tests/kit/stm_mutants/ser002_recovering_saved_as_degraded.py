"""SER-002 broken: a memory in RECOVERING is written as DEGRADED.

"The recovery attempt in flight does not cross processes, so save what is left": the
restored memory reports ``degraded`` where the original reported ``recovering``. RETRY
and DEGRADED round-trip as before.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}


class RecoveringAsDegradedMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        state = super().to_dict()
        if state["health"] == "recovering":
            state["health"] = "degraded"  # MUTATION
        return state


provider = mutant_provider("ser002-recovering-saved-as-degraded", RecoveringAsDegradedMemory)
