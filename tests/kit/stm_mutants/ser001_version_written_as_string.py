"""SER-001 broken: ``to_dict()`` writes ``version`` as a string (``"2"``).

Versions are written the way ``spec_version`` is (``"1.4.0"``): as text. The backend's own
``from_dict`` (and ``afrom_dict``, which ``hydrate`` uses) reads both forms, so its round
trips work, but the state's ``version`` must be an integer: other readers of the stored
records (the schema, a migration job, another backend) dispatch on it as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-001"
COLLATERAL: dict[str, str] = {}


class TextVersionMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["version"] = str(data["version"])  # MUTATION: "2", not 2
        return data

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(_int_version(state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:  # hydrate loads this way
        await super().afrom_dict(_int_version(state))


def _int_version(state: Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(state, Mapping) and state.get("version") == "2":
        return {**state, "version": 2}
    return state


provider = mutant_provider("ser001-version-written-as-string", TextVersionMemory)
