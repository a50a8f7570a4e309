"""SER-003 broken: a version-2 turn record without ``assistant_response`` loads.

``from_dict`` parses leniently: a turn record missing its answer gets ``""`` instead of
the state being refused as malformed, so a corrupt record loads as a conversation in
which the assistant never answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


def _lenient(state: Any) -> Any:
    if not isinstance(state, Mapping) or state.get("version") != 2:
        return state
    fixed = dict(state)
    for name in ("turns", "pending", "backlog"):
        records = fixed.get(name)
        if isinstance(records, list):
            fixed[name] = [
                {**r, "assistant_response": ""}  # MUTATION: a missing field defaults
                if isinstance(r, Mapping) and "seq" in r and "assistant_response" not in r
                else r
                for r in records
            ]
    return fixed


class LenientLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(_lenient(state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(_lenient(state))


provider = mutant_provider("ser003-lenient-missing-fields", LenientLoadMemory)
