"""CON-001 broken: ``add_turn`` writes back a window it read before an ``await``.

The window is copied, the coroutine yields to the event loop (to let the summarizer worker
run), then the copy is written back before the turn is admitted. Turns that concurrent
``add_turn`` calls admitted meanwhile are overwritten and lost; one caller at a time sees
no difference.
"""

from __future__ import annotations

import asyncio
from collections import deque

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CON-001"
COLLATERAL: dict[str, str] = {}


class StaleWindowMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        state = self._state
        window = list(state.recent)
        await asyncio.sleep(0)
        # MUTATION: the window read before the await replaces the current one
        state.recent = deque(window)
        state.recent_size = sum(e.size for e in window)
        await super().add_turn(turn)


provider = mutant_provider("con001-stale-window-written-back", StaleWindowMemory)
