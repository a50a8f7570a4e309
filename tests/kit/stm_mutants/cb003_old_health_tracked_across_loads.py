"""CB-003 broken: ``on_health_changed``'s ``old`` is the ``new`` of the previous report,
tracked by the memory, not the health the transition left.

Loads are (rightly) not reported, but they do not update the tracked health either: after
``from_dict``/``hydrate`` loads a RETRY or DEGRADED state into a HEALTHY memory, the next
transition is reported as ``(healthy, new)`` instead of ``(retry, new)``/``(degraded, new)``
-- or not at all when the tracked health equals the new one (a memory that reported
``degraded`` before loading a HEALTHY state reports no ``healthy -> degraded`` later).
CB-003: "the next transition reports the loaded health as ``old``". Without loads the
reports are the reference's.
"""

from __future__ import annotations

from typing import Any

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class TrackedHealthMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._reported = MemoryHealth.HEALTHY

    def _transition(self, change: Transition) -> None:
        old, new = change
        if old is new:
            return
        # MUTATION: old is the last reported health, which a load does not move
        old, self._reported = self._reported, new
        super()._transition((old, new))


provider = mutant_provider("cb003-old-health-tracked-across-loads", TrackedHealthMemory)
