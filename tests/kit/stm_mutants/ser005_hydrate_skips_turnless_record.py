"""SER-005 broken: ``hydrate`` takes a record holding no turn for an absent one.

A stored state whose ``turns``, ``pending`` and ``backlog`` are all empty (a fresh memory's,
or one whose every turn a summary covers, with ``full_zone_turns=0``) is skipped as "nothing
stored": the memory keeps what it held, and a summary-only state hydrated into a fresh
memory shows nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-005"
COLLATERAL: dict[str, str] = {}


class SkipTurnlessMemory(DefaultShortTermMemory):
    async def hydrate(self, store: Any, key: str) -> None:
        if not hasattr(store, "load_memory_state"):
            return
        data = await store.load_memory_state(key)
        if isinstance(data, Mapping) and not any(
            data.get(name) for name in ("turns", "pending", "backlog")
        ):
            return  # MUTATION: "empty record": treated as absent
        await super().hydrate(_Replay(store, data), key)


class _Replay:
    """The store, answering the one load already made."""

    def __init__(self, store: Any, data: Any) -> None:
        self._store, self._data = store, data

    async def load_memory_state(self, key: str) -> Any:
        return self._data


provider = mutant_provider("ser005-hydrate-skips-turnless-record", SkipTurnlessMemory)
