"""WM-001 broken: the first ``add_turn`` after a load waits until the loaded state's pending
turns are summarized.

"A loaded state must catch up before it takes new turns": ``from_dict``/``hydrate`` mark
the memory, and the next ``add_turn`` awaits ``flush()`` before it stores its turn. Spec,
WM-001: "``add_turn`` MUST NOT wait for the summarizer; it returns while a summarizer call
is in flight." Every turn after a restore with pending turns waits for an LLM call (or its
timeout); ``add_turn`` on a memory never loaded is as the reference has it.
"""

from __future__ import annotations

from typing import Any

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "WM-001"
COLLATERAL: dict[str, str] = {}


class CatchUpAfterLoadMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._catch_up = False

    def _install(self, loaded: MemoryState) -> None:
        super()._install(loaded)
        self._catch_up = bool(loaded.pending)

    async def add_turn(self, turn: ConversationTurn) -> None:
        if self._catch_up:
            self._catch_up = False
            await self.flush()  # MUTATION: the first turn after a load waits for the summarizer
        await super().add_turn(turn)


provider = mutant_provider("wm001-first-add-after-load-flushes", CatchUpAfterLoadMemory)
