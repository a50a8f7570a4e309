"""HLT-004 broken: a successful recovery returns to HEALTHY without resetting the count of
failed calls.

Only a success from RETRY resets the count ("recovery is a different path"): after a
DEGRADED -> RECOVERING -> HEALTHY recovery, the next failed call finds the count already
past ``retry_attempts`` and degrades at once, with no retry.
"""

from __future__ import annotations

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-004"
COLLATERAL: dict[str, str] = {}


class StickyCountMemory(DefaultShortTermMemory):
    def _transition(self, change: Transition) -> None:
        if change == (MemoryHealth.RECOVERING, MemoryHealth.HEALTHY):
            # MUTATION: the failures counted before DEGRADED are kept
            self._state.health.failures = self._config.retry_attempts + 1
        super()._transition(change)


provider = mutant_provider("hlt004-recovery-keeps-failure-count", StickyCountMemory)
