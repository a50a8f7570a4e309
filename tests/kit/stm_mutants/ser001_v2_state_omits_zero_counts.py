"""SER-001 broken: ``to_dict()`` leaves out fields version 2 requires when they are zero.

To keep stored states small, the backend omits ``failures`` and ``dropped_turns`` while they
are 0, still labelling the state ``"version": 2``. Its own loader puts them back before
validating, so its round trips work; but the state is not the reference format (both are
required by ``docs/memory-state.schema.json``) and a conforming reader refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-001"
COLLATERAL: dict[str, str] = {}

_COUNTS = ("failures", "dropped_turns")


def _restore(state: Any) -> Any:
    """The state with the omitted counts back; a state that has them is left as it is."""
    if isinstance(state, Mapping) and state.get("version") == 2:
        return {**{name: 0 for name in _COUNTS}, **state}
    return state


class ZeroCountsOmittedMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        for name in _COUNTS:
            # MUTATION: a required field left out of a version-2 state
            if data.get(name) == 0:
                del data[name]
        return data

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(_restore(state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(_restore(state))


provider = mutant_provider("ser001-v2-state-omits-zero-counts", ZeroCountsOmittedMemory)
