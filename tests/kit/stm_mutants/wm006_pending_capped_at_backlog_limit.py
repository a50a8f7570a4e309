"""WM-006 broken: pending turns are bounded by ``recovery_backlog_limit`` even while HEALTHY.

"Bounded memory": the backlog bound is applied to the pending list too. When more than
``recovery_backlog_limit`` turns wait for a slow summarizer, the oldest pending turns are
dropped (and counted as dropped) although the memory is not DEGRADED.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "WM-006"
COLLATERAL: dict[str, str] = {}


class CappedPendingMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        state, limit = self._state, self._config.recovery_backlog_limit
        excess = len(state.pending) - limit
        if excess > 0 and not state.health.degraded:
            # MUTATION: the pending list is cut to the backlog bound, as install cuts it
            for entry in state.pending[:excess]:
                watermark._depart(state, entry)
            del state.pending[:excess]
            state.dropped_turns += excess
            self._budget.settle(state)


provider = mutant_provider("wm006-pending-capped-at-backlog-limit", CappedPendingMemory)
