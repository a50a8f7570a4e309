"""HLT-002 broken: a turn added in RETRY makes the retry due at once.

"New material: worth trying again now": ``add_turn`` in RETRY clears the backoff timer. An
active conversation then retries a failing summarizer once per turn, not per backoff.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class HastyRetryMemory(DefaultShortTermMemory):
    async def add_turn(self, turn) -> None:
        await super().add_turn(turn)
        health = self._state.health
        if health.state is MemoryHealth.RETRY:
            health.not_before = 0.0  # MUTATION: retry now
            self._notify()  # wake a worker sleeping out the backoff


provider = mutant_provider("hlt002-add-turn-hastens-retry", HastyRetryMemory)
