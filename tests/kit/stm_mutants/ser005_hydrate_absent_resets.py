"""SER-005 broken: hydrating a key with no stored state resets the memory.

``hydrate`` replaces the state with whatever the store holds, and an empty state when it
holds nothing, so hydrating an absent key drops every turn of the memory.
"""

from __future__ import annotations

from typing import Any

from reference_impl.entries import MemoryState
from reference_impl.health import HealthMachine
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-005"
COLLATERAL: dict[str, str] = {}


class ResettingHydrateMemory(DefaultShortTermMemory):
    async def hydrate(self, store: Any, key: str) -> None:
        if hasattr(store, "load_memory_state") and await store.load_memory_state(key) is None:
            cfg = self._config
            health = HealthMachine(
                cfg.retry_attempts, cfg.retry_backoff_base_s, cfg.degraded_retry_interval_s
            )
            # MUTATION: nothing stored means a fresh, empty state
            self._state = MemoryState(health=health, key=self._state.key)
            return
        await super().hydrate(store, key)


provider = mutant_provider("ser005-hydrate-absent-resets", ResettingHydrateMemory)
