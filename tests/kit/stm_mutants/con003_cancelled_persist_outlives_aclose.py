"""CON-003 broken: the save of a ``persist`` whose caller was cancelled outlives ``aclose()``.

``persist`` shields its save so that a store finishing a write after its caller was
cancelled keeps the revision in step, but nothing remembers the shielded task: ``aclose()``
neither waits for it nor cancels it, and it goes on writing after the memory closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class UntrackedSaveMemory(DefaultShortTermMemory):
    async def persist(self, store: Any, key: str) -> None:
        save = self._persisting(store, key)
        if save is not None:
            await asyncio.shield(asyncio.ensure_future(save))  # MUTATION: not the memory's


provider = mutant_provider("con003-cancelled-persist-outlives-aclose", UntrackedSaveMemory)
