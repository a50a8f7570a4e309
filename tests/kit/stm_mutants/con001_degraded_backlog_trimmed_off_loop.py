"""CON-001 broken: in DEGRADED, ``add_turn`` trims a snapshot of the backlog in an
``await`` and writes the snapshot back.

Before admitting a turn in DEGRADED, the memory copies the backlog, awaits (standing in for
trimming it in an executor), and assigns the copy back. A turn a concurrent ``add_turn``
evicted into the backlog meanwhile is overwritten: neither in the backlog nor counted as
dropped. One caller at a time, and any concurrency outside DEGRADED, see no difference.
"""

from __future__ import annotations

import asyncio
from collections import deque

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, MemoryHealth

from . import mutant_provider

BREAKS = "CON-001"
COLLATERAL: dict[str, str] = {}


class StaleBacklogMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        state = self._state
        if state.health.state is MemoryHealth.DEGRADED:
            snapshot = list(state.backlog)
            await asyncio.sleep(0)  # "trim off the loop"
            # MUTATION: the snapshot replaces the backlog other add_turn calls extended
            state.backlog = deque(snapshot[-self._config.recovery_backlog_limit :])
        await super().add_turn(turn)


provider = mutant_provider("con001-degraded-backlog-trimmed-off-loop", StaleBacklogMemory)
