"""CB-001 broken: under strategy ``none``, ``on_turn_added`` runs for turns that are not stored.

The callback is emitted at the top of ``add_turn``, before the strategy is consulted, so a
memory configured off (which stores nothing, STR-001) still reports every turn as added.
Observers that persist or count added turns then record a conversation the memory never
held. Under ``truncation`` and ``rolling_summary`` each stored turn is reported once.
"""

from __future__ import annotations

from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class EagerNotifyMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if self._config.strategy == "none" and not self._closed:
            check_turn(turn)
            self._on_turn.emit(turn)  # MUTATION: reported although nothing is stored
        await super().add_turn(turn)


provider = mutant_provider("cb001-none-strategy-reports-turns", EagerNotifyMemory)
