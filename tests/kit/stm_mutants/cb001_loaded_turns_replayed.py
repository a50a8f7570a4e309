"""CB-001 broken: loading a state reports its turns to ``on_turn_added`` again.

``hydrate`` (through ``afrom_dict``) replays ``on_turn_added`` for every turn the loaded
state holds in pending and recent, so that observers "rebuild their view of the
conversation": a turn added once, persisted and hydrated is reported twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class ReplayingMemory(DefaultShortTermMemory):
    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        await super().afrom_dict(state)
        if self._config.strategy != "none":
            for entry in [*self._state.pending, *self._state.recent]:
                self._on_turn.emit(entry.turn)  # MUTATION: loaded turns reported again


provider = mutant_provider("cb001-loaded-turns-replayed", ReplayingMemory)
