"""SER-003 broken: a refused ``from_dict`` leaves the memory half-loaded.

The current recent turns are dropped as soon as the input has a ``turns`` entry, before the
input is validated; a malformed state then raises ``ValueError`` with the window emptied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-003"
COLLATERAL: dict[str, str] = {}


class PartialLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and "turns" in state:
            while self._state.recent:  # MUTATION: old turns dropped before validation
                self._state.pop_recent()
        super().from_dict(state)


provider = mutant_provider("ser003-partial-from-dict", PartialLoadMemory)
