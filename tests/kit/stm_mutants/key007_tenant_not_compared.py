"""KEY-007 broken: from_dict compares only user_id and session_id of the recorded key with
the memory's key; another tenant's state with the same user and session ids loads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-007"
COLLATERAL: dict[str, str] = {}


class TenantBlindLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and isinstance(state.get("key"), Mapping) and self.key:
            stored = state["key"]
            valid = set(stored) == {"tenant_id", "user_id", "session_id"} and all(
                type(v) is str for v in stored.values()
            )  # the schema validates the key as usual; only the comparison is wrong
            if valid and (stored.get("user_id"), stored.get("session_id")) == (
                self.key.user_id,
                self.key.session_id,
            ):
                # MUTATION: the tenant is not part of the comparison
                state = {**state, "key": self.key.as_dict()}
        super().from_dict(state)


provider = mutant_provider("key007-tenant-not-compared", TenantBlindLoadMemory)
