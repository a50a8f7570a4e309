"""SER-005 broken: ``persist`` saves under the memory's own ``key.composite()``, not the
storage key it is given.

A memory that knows its key writes ``save_memory_state(self.key.composite(), state)``
whatever ``key`` the caller passed (it "knows better"); ``hydrate`` still loads from the key
given. Callers that pass ``composite()`` anyway see no difference.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-005"
COLLATERAL: dict[str, str] = {}


class OwnStorageKeyMemory(DefaultShortTermMemory):
    async def persist(self, store: Any, key: str) -> None:
        if self._state.key is not None:
            key = self._state.key.composite()  # MUTATION
        await super().persist(store, key)


provider = mutant_provider("ser005-persist-under-own-composite-key", OwnStorageKeyMemory)
