"""CB-003 broken: entering DEGRADED is reported twice.

The failure path reports RETRY -> DEGRADED, and so does the step that moves the pending
turns to the backlog, which "announces" the degraded mode it sets up. Observers count two
degradations for one. Other transitions are reported once each.
"""

from __future__ import annotations

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class DoubleDegradeMemory(DefaultShortTermMemory):
    def _transition(self, change: Transition) -> None:
        super()._transition(change)
        old, new = change
        if new is MemoryHealth.DEGRADED and old is not MemoryHealth.RECOVERING:
            self._on_health.emit(old, new)  # MUTATION: announced again with the backlog move


provider = mutant_provider("cb003-degrade-reported-twice", DoubleDegradeMemory)
