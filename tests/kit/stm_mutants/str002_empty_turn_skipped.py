"""STR-002 broken: under ``truncation`` a turn with an empty message and answer is skipped.

Taken for a heartbeat, a turn whose ``user_message`` and ``assistant_response`` are both
``""`` is not stored, so the window shows an older turn in its place. Every other turn is
kept as before.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "STR-002"
COLLATERAL: dict[str, str] = {}


class SkipEmptyTurnMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if (
            self._config.strategy == "truncation"
            and isinstance(turn, ConversationTurn)
            and turn.user_message == turn.assistant_response == ""
            and turn.trajectory_digest is None
        ):
            return  # MUTATION: an "empty" turn is not a turn
        await super().add_turn(turn)


provider = mutant_provider("str002-empty-turn-skipped", SkipEmptyTurnMemory)
