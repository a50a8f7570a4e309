"""HLT-006 broken: a turn evicted to the DEGRADED backlog makes a recovery attempt due at once.

"The backlog changed, try to recover now": ``add_turn`` while DEGRADED clears the recovery
timer, so an active degraded conversation attempts recovery on every turn instead of at most
once per ``degraded_retry_interval_s``.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-006"
COLLATERAL: dict[str, str] = {}


class EagerRecoveryOnTurnMemory(DefaultShortTermMemory):
    async def add_turn(self, turn) -> None:
        await super().add_turn(turn)
        health = self._state.health
        if health.state is MemoryHealth.DEGRADED and self._state.backlog:
            health.not_before = 0.0  # MUTATION: recover now
            self._notify()


provider = mutant_provider("hlt006-new-backlog-turn-triggers-recovery", EagerRecoveryOnTurnMemory)
