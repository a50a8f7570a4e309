"""KEY-007 broken: the user part of a recorded key is compared case-insensitively.

Taking user ids for e-mail addresses, ``from_dict`` (and ``hydrate``, which loads the same
way) treats a state recorded for ``user_id="Ann"`` as this memory's when its own key has
``user_id="ann"`` (same tenant and session) and loads it. Tenant and session are compared
exactly, as is any other difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-007"
COLLATERAL: dict[str, str] = {}


class CasefoldUserMemory(DefaultShortTermMemory):
    def _adopt(self, state: Any) -> Any:
        own = self._state.key
        if own is None or not isinstance(state, Mapping):
            return state
        recorded = state.get("key")
        if not isinstance(recorded, Mapping):
            return state
        mine = own.as_dict()
        if (
            recorded.get("tenant_id") == mine["tenant_id"]
            and recorded.get("session_id") == mine["session_id"]
            and isinstance(recorded.get("user_id"), str)
            and recorded["user_id"].casefold() == mine["user_id"].casefold()
        ):
            return {**state, "key": mine}  # MUTATION: "the same user"
        return state

    def from_dict(self, state: Any) -> None:
        super().from_dict(self._adopt(state))

    async def afrom_dict(self, state: Any) -> None:
        await super().afrom_dict(self._adopt(state))


provider = mutant_provider("key007-user-id-compared-casefolded", CasefoldUserMemory)
