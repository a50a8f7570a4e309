"""CB-001 broken: ``on_turn_added`` reports a turn only if it is still in the recent window
when ``add_turn`` returns ("report the turns that made it into the conversation").

A turn that goes straight to pending -- ``full_zone_turns=0`` under ``rolling_summary``,
or a tight ``total_max_tokens`` that evicts it to pending at once -- is stored (it is
pending, later summarized) but never reported.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        queue, seq = self._on_turn, self._state.next_seq
        emit = queue.emit

        def emit_if_recent(*args: Any) -> None:
            # MUTATION: reported only when the new turn is still in recent after trimming
            if any(entry.seq == seq for entry in self._state.recent):
                emit(*args)

        queue.emit = emit_if_recent  # type: ignore[method-assign]
        try:
            await super().add_turn(turn)
        finally:
            del queue.emit


provider = mutant_provider("cb001-turn-evicted-at-once-not-reported", Memory)
