"""WM-001 broken: ``add_turn`` waits for the summarizer call it triggered.

After recording the turn, ``add_turn`` awaits the memory's summarizer worker, bounded by
``summarizer_timeout_s`` (the longest a call may run anyway), so a slow summarizer stalls
the conversation.
"""

from __future__ import annotations

import asyncio

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

SLOW = "every add_turn under rolling_summary waits out the kit's add_turn limit"
BREAKS = "WM-001"
COLLATERAL = {
    "HLT-002": (
        "add_turn returns only once the worker has run its retries, so the RETRY state "
        "the check waits for is over before it can look"
    ),
    "HLT-004": (
        "likewise, add_turn waits out the failing calls, so the check never sees the "
        "DEGRADED it prepares"
    ),
}


class BlockingAddTurnMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        worker = self._worker
        if worker is not None and not worker.done():
            # MUTATION: wait for the summarizer inline
            await asyncio.wait({worker}, timeout=self._config.summarizer_timeout_s)


provider = mutant_provider("wm001-add-turn-awaits-summarizer", BlockingAddTurnMemory)
