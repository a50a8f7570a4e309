"""SER-003 broken: from_dict ignores the fields of a state it does not know.

Taken for forward compatibility, a version 2 state's unknown fields (at the top level and
in its turn records) are dropped before the state is validated. The next ``to_dict()``
loses them without a word; the format defines no such field, so the state is malformed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.schema import MemoryStateV2, TurnV2

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}

_STATE = set(MemoryStateV2.model_fields)
_TURN = set(TurnV2.model_fields)


def _known(state: Mapping[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in state.items() if k in _STATE}
    for name in ("turns", "pending", "backlog"):
        if isinstance(kept.get(name), list):
            kept[name] = [
                {k: v for k, v in t.items() if k in _TURN} if isinstance(t, dict) else t
                for t in kept[name]
            ]
    return kept


class LenientMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and state.get("version") == 2:
            state = _known(state)  # MUTATION: what the loader does not know is dropped
        super().from_dict(state)


provider = mutant_provider("ser003-unknown-fields-ignored", LenientMemory)
