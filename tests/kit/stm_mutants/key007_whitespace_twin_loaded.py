"""KEY-007 broken: ``from_dict``/``hydrate`` compare the recorded key with the memory's
after stripping surrounding whitespace from each part.

A "lenient" loader meant to tolerate ids that picked up a stray space somewhere: a state
recorded for ``MemoryKey("t ", "u", "s")`` loads into the memory of ``MemoryKey("t", "u",
"s")`` (and is then recorded under the loading memory's key). These are two keys (KEY-002
keeps them apart in storage), so one grafts the other's memory. KEY-007: "loading it into a
memory or store key it does not belong to MUST be refused". Keys that differ otherwise
(case included) are still refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-007"
COLLATERAL: dict[str, str] = {}


def _lenient(memory: DefaultShortTermMemory, state: Any) -> Any:
    own = memory.key
    if own is None or not isinstance(state, Mapping) or not isinstance(state.get("key"), Mapping):
        return state
    recorded = state["key"]
    parts = ("tenant_id", "user_id", "session_id")
    if all(isinstance(recorded.get(p), str) for p in parts) and all(
        recorded[p].strip() == getattr(own, p).strip() for p in parts
    ):
        # MUTATION: a whitespace twin of this memory's key counts as this memory's key
        return {**state, "key": own.as_dict()}
    return state


class LenientKeyMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(_lenient(self, state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(_lenient(self, state))


provider = mutant_provider("key007-whitespace-twin-loaded", LenientKeyMemory)
