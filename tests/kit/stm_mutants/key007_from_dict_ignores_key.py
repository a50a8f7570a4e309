"""KEY-007 broken: ``from_dict`` accepts a state recorded for another key.

The key recorded in the state is discarded before loading, so another key's state is
grafted onto this memory instead of being refused with ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-007"
COLLATERAL: dict[str, str] = {
    "SER-003": "the key is discarded before it is validated, so a malformed key (a part "
    "missing) is accepted too",
}


class KeyBlindLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and "key" in state:
            state = {**state, "key": None}  # MUTATION: the recorded key is never compared
        super().from_dict(state)


provider = mutant_provider("key007-from-dict-ignores-key", KeyBlindLoadMemory)
