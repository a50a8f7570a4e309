"""SER-005 broken: ``persist`` does not save the DEGRADED backlog.

The backlog is taken for a process-local buffer ("it is rebuilt from evictions"), so the
record a memory persists has ``"backlog": []``. The in-memory state and ``to_dict()`` keep
it. A memory hydrated from that record shows the same view and health (DEGRADED shows
recent turns only), but the turns waiting for recovery are gone: its next recovery
summarizes only what is evicted after the hydrate, and nothing counts the loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-005"
COLLATERAL: dict[str, str] = {}


def _without_backlog(state: Mapping[str, Any]) -> dict[str, Any]:
    record = dict(state)
    record["backlog"] = []  # MUTATION: the backlog is not written to the store
    return record


class _NoBacklogRecords:
    def __init__(self, store: Any) -> None:
        self._store = store
        if hasattr(store, "save_memory_state_if"):
            self.save_memory_state_if = self._save_if

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        await self._store.save_memory_state(key, _without_backlog(state))

    async def _save_if(self, key: str, state: Mapping[str, Any], **kwargs: Any) -> None:
        await self._store.save_memory_state_if(key, _without_backlog(state), **kwargs)


class NoBacklogPersistMemory(DefaultShortTermMemory):
    async def persist(self, store: Any, key: str) -> None:
        if not hasattr(store, "save_memory_state"):
            return
        await super().persist(_NoBacklogRecords(store), key)


provider = mutant_provider("ser005-persist-drops-backlog", NoBacklogPersistMemory)
