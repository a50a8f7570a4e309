"""SER-004 broken: hydrate refuses a stored record that does not name the storage key it
was saved under ("storage_key"): every state PenguiFlow's DefaultShortTermMemory persisted
(version 1, which has no such field) is ignored, so an existing deployment cannot migrate
by hydrating its records. from_dict of the same v1 state loads as by the reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-004"
COLLATERAL: dict[str, str] = {}


class StrictHydrateMemory(DefaultShortTermMemory):
    async def hydrate(self, store: Any, key: str) -> None:
        if not hasattr(store, "load_memory_state"):
            return
        data = await store.load_memory_state(key)
        if isinstance(data, Mapping) and data.get("storage_key") is None:
            return  # MUTATION: a record without storage_key is taken for a foreign one
        await super().hydrate(store, key)


provider = mutant_provider("ser004-hydrate-requires-storage-key", StrictHydrateMemory)
