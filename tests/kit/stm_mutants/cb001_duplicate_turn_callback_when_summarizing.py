"""CB-001 broken: under ``rolling_summary``, ``on_turn_added`` runs twice per turn."""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class DoubleNotifyMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        if self._config.strategy == "rolling_summary":
            self._on_turn.emit(turn)  # MUTATION: a second notification for the same turn


provider = mutant_provider("cb001-duplicate-turn-callback", DoubleNotifyMemory)
