"""SER-006 broken on stores with a conditional save: the revision never advances.

The backend takes a store with ``save_memory_state_if`` to assign revisions itself, so it
writes the state with the revision it holds (not one higher) and never advances it: every
conditional save carries the same revision. Stores with ``save_memory_state`` alone get
the reference behaviour.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-006"
COLLATERAL: dict[str, str] = {}


class StoreRevisionMemory(DefaultShortTermMemory):
    def _persisting(self, store: Any, key: str) -> Coroutine[Any, Any, None] | None:
        conditional = getattr(store, "save_memory_state_if", None)
        if conditional is None:
            return super()._persisting(store, key)
        memory_state = self._state
        state, self._records = schema.dump_reusing(memory_state, self._config, self._records)
        current = memory_state.revision
        state["revision"] = current  # MUTATION: "the store bumps it"
        state["storage_key"] = key

        async def save() -> None:
            expected = current if memory_state.stored else None
            await conditional(key, state, expected_revision=expected)
            memory_state.stored = True

        return save()


provider = mutant_provider("ser006-conditional-save-keeps-revision", StoreRevisionMemory)
