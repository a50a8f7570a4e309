"""SER-003 broken: from_dict coerces the integer fields of a state from strings and
integral floats ("3", 3.0), as a state read back from a store that keeps numbers as text
would need; such a state is malformed (the schema wants integers) and must be refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}

_INTS = ("failures", "summarized_through", "next_seq", "dropped_turns", "revision")


def _coerce(value: Any) -> Any:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class CoercingMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 2:
            # MUTATION: numbers as text or floats are taken as integers
            state = {k: _coerce(v) if k in _INTS else v for k, v in state.items()}
        super().from_dict(state)


provider = mutant_provider("ser003-numbers-coerced", CoercingMemory)
