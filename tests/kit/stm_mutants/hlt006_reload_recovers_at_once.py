"""HLT-006 broken: loading a DEGRADED state makes a recovery attempt due at once.

"Timers do not cross processes, so attempt now": every ``from_dict``/``hydrate`` of a
DEGRADED state with a backlog clears the recovery timer, however recently the last attempt
failed. A memory reloaded often (a worker that hydrates per request) makes one recovery
attempt per load instead of one per ``degraded_retry_interval_s``.
"""

from __future__ import annotations

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-006"
COLLATERAL: dict[str, str] = {}


class EagerRecoveryMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:
        super()._install(loaded)
        if loaded.health.degraded:
            loaded.health.not_before = 0.0  # MUTATION: recovery due at once after a load


provider = mutant_provider("hlt006-reload-recovers-at-once", EagerRecoveryMemory)
