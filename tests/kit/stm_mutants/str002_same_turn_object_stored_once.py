"""STR-002 broken: under ``truncation``, adding the very turn object just added again stores
nothing ("a retried ``add_turn``").

The memory keeps the last turn it was given and ignores an ``add_turn`` of the same object
(``is``), so an agent that appends one ``ConversationTurn`` instance twice (a canned reply
sent twice) sees one turn in the window where two were added; turns equal but distinct are
stored. Spec, STR-002: "Strategy ``truncation`` MUST show exactly the last
``full_zone_turns`` turns (fewer while fewer were added)". No callback runs for the skipped
turn, consistently with it not being stored.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "STR-002"
COLLATERAL: dict[str, str] = {}


class IdempotentTruncationMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_turn: ConversationTurn | None = None

    async def add_turn(self, turn: ConversationTurn) -> None:
        if self._config.strategy == "truncation" and turn is self._last_turn:
            return  # MUTATION: the same object twice is stored once
        await super().add_turn(turn)
        self._last_turn = turn


provider = mutant_provider("str002-same-turn-object-stored-once", IdempotentTruncationMemory)
