"""KEY-007 broken: ``hydrate`` skips the key check for a record without ``storage_key``.

Records without a ``storage_key`` are taken for legacy ones (PenguiFlow's version 1 records
carry none) and loaded as this memory's own, whatever key the state records. A version 2
record written by another writer that does not set ``storage_key`` (or a state copied from
``to_dict()`` into the store) of another key is grafted. ``from_dict`` still refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-007"
COLLATERAL: dict[str, str] = {}


class TrustingHydrateMemory(DefaultShortTermMemory):
    async def hydrate(self, store: Any, key: str) -> None:
        if not hasattr(store, "load_memory_state"):
            return
        data = await store.load_memory_state(key)
        if (
            isinstance(data, Mapping)
            and data.get("storage_key") is None
            and self._state.key is not None
            and isinstance(data.get("key"), Mapping)
        ):
            # MUTATION: "legacy" record: adopt it as this memory's
            data = {**data, "key": self._state.key.as_dict()}
            await self.afrom_dict(data)
            self._state.stored = True
            return
        await super().hydrate(store, key)


provider = mutant_provider(
    "key007-hydrate-trusts-record-without-storage-key", TrustingHydrateMemory
)
