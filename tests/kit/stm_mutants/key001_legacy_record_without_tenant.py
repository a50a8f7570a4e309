"""KEY-001 broken: a tenant-less legacy record is written and read as a fallback.

During a migration the backend dual-writes: besides its own record, every ``persist`` also
saves a version-1 copy (which records no key) for older readers, under the storage key
its previous release used, ``legacy:<user>:<session>``; ``hydrate`` falls back to that
copy when its own key has no record. The old key has no tenant: a memory of tenant B
hydrating ``(B, u, s)`` for the first time loads what tenant A persisted for ``(A, u, s)``.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryKey

from . import mutant_provider

BREAKS = "KEY-001"
COLLATERAL: dict[str, str] = {}

_V1_TURN = ("user_message", "assistant_response", "trajectory_digest", "ts")


def _legacy_key(key: MemoryKey) -> str:
    return f"legacy:{key.user_id}:{key.session_id}"  # MUTATION: no tenant in the old key


class DualWriteMemory(DefaultShortTermMemory):
    def _legacy_state(self) -> dict[str, Any]:
        state = self.to_dict()
        parts = {
            p: [{f: t[f] for f in _V1_TURN} for t in state[p]]
            for p in ("turns", "pending", "backlog")
        }
        return {
            "version": 1,
            "health": state["health"],
            "summary": state["summary"],
            **parts,
            "config_snapshot": {"strategy": state["strategy"]},
        }

    async def persist(self, store: Any, key: str) -> None:
        await super().persist(store, key)
        if self.key is not None and hasattr(store, "save_memory_state"):
            await store.save_memory_state(_legacy_key(self.key), self._legacy_state())

    async def hydrate(self, store: Any, key: str) -> None:
        own = self.key
        if (
            own is not None
            and hasattr(store, "load_memory_state")
            and await store.load_memory_state(key) is None
        ):
            legacy = await store.load_memory_state(_legacy_key(own))
            if legacy is not None:
                self.from_dict(legacy)
                return
        await super().hydrate(store, key)


provider = mutant_provider("key001-legacy-record-without-tenant", DualWriteMemory)
