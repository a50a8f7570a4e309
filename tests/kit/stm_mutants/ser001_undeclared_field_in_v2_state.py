"""SER-001 broken: ``to_dict()`` writes a field version 2 does not define.

For dashboards, the backend adds ``"summary_tokens"`` (the size of the summary) at the top
level of every state it writes, still labelled ``"version": 2``. Its own loader knows the
field and drops it before validating, so its round trips work; but the state is not the
reference format (``docs/memory-state.schema.json`` has ``additionalProperties: false``)
and a conforming reader refuses it (SER-003: a format that gains a field is a new version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-001"
COLLATERAL: dict[str, str] = {}

_FIELD = "summary_tokens"


def _strip(state: Any) -> Any:
    """The state without the backend's own field, which is checked as strictly as the
    reference checks its counts (a non-negative int, not a bool)."""
    if isinstance(state, Mapping) and state.get("version") == 2 and _FIELD in state:
        value = state[_FIELD]
        if type(value) is not int or value < 0:
            raise ValueError(f"invalid memory state: {_FIELD} must be an int >= 0")
        return {k: v for k, v in state.items() if k != _FIELD}
    return state


class ExtraFieldMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        # MUTATION: a field the version-2 schema does not define
        data[_FIELD] = self._budget.meter.text_size(self._state.summary)
        return data

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(_strip(state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(_strip(state))


provider = mutant_provider("ser001-undeclared-field-in-v2-state", ExtraFieldMemory)
