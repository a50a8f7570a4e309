"""SER-005 broken: persisted states lose the turns' trajectory digests.

Records are written in a "compact" form: the digest of each turn (tools, observations,
reasoning) is treated as prompt decoration and left out of what ``persist`` saves. The
in-memory state, ``to_dict()`` and round trips through ``from_dict`` keep digests, but a
memory hydrated from the store renders its turns without them: it is not the memory that
was persisted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-005"
COLLATERAL: dict[str, str] = {}


def _compact(state: Mapping[str, Any]) -> dict[str, Any]:
    record = dict(state)
    for part in ("turns", "pending", "backlog"):
        # MUTATION: digests are not written to the store
        record[part] = [{**t, "trajectory_digest": None} for t in record.get(part, [])]
    return record


class _CompactRecords:
    """The store as ``persist`` sees it: every saved record compacted first."""

    def __init__(self, store: Any) -> None:
        self._store = store
        if hasattr(store, "save_memory_state_if"):
            self.save_memory_state_if = self._save_if

    async def save_memory_state(self, key: str, state: Mapping[str, Any]) -> None:
        await self._store.save_memory_state(key, _compact(state))

    async def _save_if(self, key: str, state: Mapping[str, Any], **kwargs: Any) -> None:
        await self._store.save_memory_state_if(key, _compact(state), **kwargs)


class CompactRecordMemory(DefaultShortTermMemory):
    async def persist(self, store: Any, key: str) -> None:
        if not hasattr(store, "save_memory_state"):
            return
        await super().persist(_CompactRecords(store), key)


provider = mutant_provider("ser005-persist-drops-digests", CompactRecordMemory)
