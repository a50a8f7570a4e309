"""CB-003 broken: a failed recovery attempt's return to DEGRADED is not reported.

The backend treats RECOVERING -> DEGRADED as "back where it was, nothing to report": the
transition happens (``health`` is DEGRADED again) but ``on_health_changed`` is not run for
it. A monitor then sees DEGRADED -> RECOVERING, and at the next attempt DEGRADED ->
RECOVERING again, with no way back in between; every other transition is reported.
"""

from __future__ import annotations

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class QuietFailedRecoveryMemory(DefaultShortTermMemory):
    def _transition(self, change: Transition) -> None:
        if change == (MemoryHealth.RECOVERING, MemoryHealth.DEGRADED):
            return  # MUTATION: a failed recovery is not reported
        super()._transition(change)


provider = mutant_provider("cb003-failed-recovery-not-reported", QuietFailedRecoveryMemory)
