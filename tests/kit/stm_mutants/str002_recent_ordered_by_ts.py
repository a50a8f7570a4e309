"""STR-002 broken: a truncation memory keeps its window ordered by the turns' timestamps
(as a sorted set scored by ``ts`` would), not by the order the turns were added. Turns whose
clocks disagree (a turn stamped earlier than one added before it) are shown out of order
and the window evicts the earliest-stamped turn, not the oldest added. With equal or
increasing stamps it behaves as the reference."""

from __future__ import annotations

from collections import deque

from reference_impl import watermark
from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, MemoryBudgetExceeded

from . import mutant_provider

BREAKS = "STR-002"
COLLATERAL: dict[str, str] = {}


class TimestampOrderedMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        config = self._config
        if config.strategy != "truncation" or self._closed:
            await super().add_turn(turn)
            return
        check_turn(turn)
        state = self._state
        entry = Entry.make(
            state.next_seq,
            turn,
            include_digest=config.include_trajectory_digest,
            size_of=self._size_of if state.metered else None,
        )
        if config.budget.overflow_policy == "error" and not self._budget.fits_after_add(
            state, entry
        ):
            raise MemoryBudgetExceeded("turn would take the memory over total_max_tokens")
        state.push_recent(entry)
        state.next_seq = entry.seq + 1
        # MUTATION: the window is a sorted set scored by ts (stable for equal stamps)
        state.recent = deque(sorted(state.recent, key=lambda e: e.turn.ts))
        while len(state.recent) > config.budget.full_zone_turns:
            watermark.evict_oldest_recent(state, config)
        try:
            self._budget.enforce(state)
        finally:  # stored even when the estimator failed on the view, as by the reference
            self._changes += 1
            self._on_turn.emit(turn)


provider = mutant_provider("str002-recent-ordered-by-ts", TimestampOrderedMemory)
