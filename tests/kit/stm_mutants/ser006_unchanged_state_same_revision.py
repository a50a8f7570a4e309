"""SER-006 broken: a persist with nothing changed since the last successful persist writes
the state again with the same revision ("nothing new, same revision"), instead of one
higher than the state the memory holds."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-006"
COLLATERAL: dict[str, str] = {}


class DirtyFlagMemory(DefaultShortTermMemory):
    _persisted_at: int | None = None

    def _persisting(self, store: Any, key: str) -> Coroutine[Any, Any, None] | None:
        if not hasattr(store, "save_memory_state"):
            return None
        memory_state = self._state
        if self._persisted_at == self._changes and memory_state.stored:
            state, self._records = schema.dump_reusing(memory_state, self._config, self._records)
            state["revision"] = memory_state.revision  # MUTATION: not advanced
            state["storage_key"] = key

            async def again() -> None:
                await store.save_memory_state(key, state)

            return again()
        inner = super()._persisting(store, key)
        if inner is None:
            return None
        changes = self._changes

        async def save() -> None:
            await inner
            self._persisted_at = changes

        return save()


provider = mutant_provider("ser006-unchanged-state-same-revision", DirtyFlagMemory)
