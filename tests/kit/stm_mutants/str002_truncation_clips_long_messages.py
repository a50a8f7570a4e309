"""STR-002 broken: under ``truncation`` a long message is clipped when it is stored.

"Protect the prompt from a pasted log": ``add_turn`` of a truncation memory cuts
``user_message`` and ``assistant_response`` to their first 4,096 characters before
storing the turn. Short turns are untouched; a turn with a long message is shown (and
saved) as a different, shorter turn, so the window no longer shows the turns added.
``rolling_summary`` memories store turns as given.
"""

from __future__ import annotations

import dataclasses

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "STR-002"
COLLATERAL: dict[str, str] = {}

MAX_MESSAGE_CHARS = 4096


class ClippingTruncationMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if (
            self._config.strategy == "truncation"
            and isinstance(turn, ConversationTurn)
            and isinstance(turn.user_message, str)
            and isinstance(turn.assistant_response, str)
            and max(len(turn.user_message), len(turn.assistant_response)) > MAX_MESSAGE_CHARS
        ):
            # MUTATION: long messages are clipped to their head
            turn = dataclasses.replace(
                turn,
                user_message=turn.user_message[:MAX_MESSAGE_CHARS],
                assistant_response=turn.assistant_response[:MAX_MESSAGE_CHARS],
            )
        await super().add_turn(turn)


provider = mutant_provider("str002-truncation-clips-long-messages", ClippingTruncationMemory)
