"""SER-003 broken: from_dict clamps a negative count of a state to zero.

A version 2 state whose ``failures``, ``dropped_turns`` or ``revision`` is negative loads
with zero there, as a loader "repairing" a hand-edited record would. The schema refuses a
negative count (``minimum: 0``): the state is malformed, and a repaired ``revision`` would
let a stale writer's record pass for the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}

_COUNTS = ("failures", "dropped_turns", "revision")


def _clamped(value: Any) -> Any:
    return 0 if type(value) is int and value < 0 else value


class ClampingMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 2:
            # MUTATION: a negative count is taken for zero
            state = {k: _clamped(v) if k in _COUNTS else v for k, v in state.items()}
        super().from_dict(state)


provider = mutant_provider("ser003-negative-counts-clamped", ClampingMemory)
