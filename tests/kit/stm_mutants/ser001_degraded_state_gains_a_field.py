"""SER-001 broken: a state saved DEGRADED (or RECOVERING) has a field version 2 lacks.

For operators, ``to_dict()`` of a memory whose summarizer is down adds ``"degraded_at"``
(the wall-clock time it degraded) at the top level, still labelled ``"version": 2``. Its
own loader knows the field and drops it, so its round trips work; HEALTHY and RETRY
states are exactly the reference's. Spec, SER-001: "the reference format (version 2) is
validated by ``docs/memory-state.schema.json``" (``additionalProperties: false``; SER-003:
"a format that gains a field is a new version").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "SER-001"
COLLATERAL: dict[str, str] = {}

_FIELD = "degraded_at"


def _strip(state: Any) -> Any:
    if isinstance(state, Mapping) and state.get("version") == 2 and _FIELD in state:
        value = state[_FIELD]
        if type(value) is not float:
            raise ValueError(f"invalid memory state: {_FIELD} must be a float")
        return {k: v for k, v in state.items() if k != _FIELD}
    return state


class DegradedAtMemory(DefaultShortTermMemory):
    _degraded_at: float = 0.0

    def _transition(self, change: Transition) -> None:
        if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
            self._degraded_at = time.time()
        super()._transition(change)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if self._state.health.degraded:
            # MUTATION: a field the version-2 schema does not define
            data[_FIELD] = float(self._degraded_at)
        return data

    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(_strip(state))

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(_strip(state))


provider = mutant_provider("ser001-degraded-state-gains-a-field", DegradedAtMemory)
