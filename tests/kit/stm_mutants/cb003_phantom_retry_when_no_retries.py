"""CB-003 broken: with ``retry_attempts=0`` a degrade is reported as two transitions.

The failure handler always enters RETRY first and then, its retries exhausted, DEGRADED,
reporting each step: with ``retry_attempts=0`` the first failure moves HEALTHY straight
to DEGRADED (``health`` never reads ``retry``), yet ``on_health_changed`` receives
``(healthy, retry)`` then ``(retry, degraded)``. The chain is consistent, but one of its
transitions never happened. With retries allowed the reports are the reference's. Spec,
CB-003: "``on_health_changed(old, new)`` MUST run once per transition ..., in the order
the transitions happened".
"""

from __future__ import annotations

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class PhantomRetryMemory(DefaultShortTermMemory):
    def _transition(self, change: Transition) -> None:
        if change == (MemoryHealth.HEALTHY, MemoryHealth.DEGRADED):
            # MUTATION: reported through a RETRY the memory was never in
            super()._transition((MemoryHealth.HEALTHY, MemoryHealth.RETRY))
            super()._transition((MemoryHealth.RETRY, MemoryHealth.DEGRADED))
            return
        super()._transition(change)


provider = mutant_provider("cb003-phantom-retry-when-no-retries", PhantomRetryMemory)
