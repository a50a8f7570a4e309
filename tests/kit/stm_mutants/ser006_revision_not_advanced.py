"""SER-006 broken: every ``persist()`` writes the same revision.

The saved state carries ``revision + 1``, but the memory never records that it saved it,
so the next save carries the same revision again and a stale writer cannot be told apart.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-006"
COLLATERAL: dict[str, str] = {}


class StaleRevisionMemory(DefaultShortTermMemory):
    async def persist(self, store: Any, key: str) -> None:
        revision = self._state.revision
        await super().persist(store, key)
        self._state.revision = revision  # MUTATION: the saved revision is forgotten


provider = mutant_provider("ser006-revision-not-advanced", StaleRevisionMemory)
