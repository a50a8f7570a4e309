"""WM-001 broken: back-pressure: ``add_turn`` waits for the summarizer once more than 16
turns are pending.

A memory "protecting" the summarizer from a backlog: when an ``add_turn`` leaves more than
16 turns pending while a summarizer call is in flight, it waits (bounded by
``summarizer_timeout_s``) for the worker to catch up. With fewer pending turns, it returns
at once as the reference does.
"""

from __future__ import annotations

import asyncio

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "WM-001"
COLLATERAL: dict[str, str] = {}
PENDING_HIGH_WATER = 16


class BackpressureMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        worker = self._worker
        if (
            len(self._state.pending) > PENDING_HIGH_WATER
            and worker is not None
            and not worker.done()
        ):
            # MUTATION: wait for the summarizer to catch up
            await asyncio.wait({worker}, timeout=self._config.summarizer_timeout_s)


provider = mutant_provider("wm001-backpressure-on-long-pending", BackpressureMemory)
