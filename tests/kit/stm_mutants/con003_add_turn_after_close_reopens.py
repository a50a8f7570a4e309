"""CON-003 broken: ``add_turn`` on a closed memory is accepted and restarts the summarizer
worker.

"aclose() releases background work; a memory used again picks it up": instead of refusing
``add_turn`` after ``aclose()``, the memory stores the turn and wakes a worker, which (the
loop relying on aclose() to cancel it) summarizes with nobody left to cancel it. A memory
that is not closed behaves as the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider
from ._util import WorkerChange, work

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class ReopenOnAddMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if not self._closed:
            await super().add_turn(turn)
            return
        self._closed = False  # MUTATION: a closed memory takes the turn and wakes a worker
        try:
            await super().add_turn(turn)
        finally:
            self._closed = True

    async def _work(self) -> None:
        await work(self, WorkerChange(stops_when_closed=False))


provider = mutant_provider("con003-add-turn-after-close-reopens", ReopenOnAddMemory)
