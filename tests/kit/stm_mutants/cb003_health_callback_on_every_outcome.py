"""CB-003 broken: ``on_health_changed`` also runs when the health did not change.

Every outcome of the health machine is reported, so RETRY -> RETRY (a failed retry) and
HEALTHY -> HEALTHY (each successful call) reach the callback as if they were transitions.
"""

from __future__ import annotations

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class ChattyHealthMemory(DefaultShortTermMemory):
    def _transition(self, change: Transition) -> None:
        old, new = change
        self._on_health.emit(old, new)  # MUTATION: no `old is not new` test


provider = mutant_provider("cb003-health-callback-on-every-outcome", ChattyHealthMemory)
