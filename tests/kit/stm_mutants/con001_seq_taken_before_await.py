"""CON-001 broken: the turn's sequence number is taken before an ``await``, and admission
is idempotent by sequence number.

``add_turn`` numbers the turn, yields to the loop (say, to let the summarizer worker run),
then admits it, skipping a turn whose number the memory already holds (taken for a retried
``add_turn`` of the same turn). One caller at a time never sees a duplicate number;
concurrent callers all read the same ``next_seq`` and all but one of their turns are
skipped.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, MemoryBudgetExceeded

from . import mutant_provider

BREAKS = "CON-001"
COLLATERAL: dict[str, str] = {}


class SeqBeforeAwaitMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if self._closed:
            raise RuntimeError("add_turn on a closed memory")
        check_turn(turn)
        config = self._config
        if config.strategy == "none":
            return
        seq = self._state.next_seq
        await asyncio.sleep(0)  # MUTATION: the number was read before this await
        state = self._state
        held = (*state.recent, *state.pending, *state.backlog)
        if any(e.seq == seq for e in held):
            return  # "already admitted": a retried add_turn
        entry = Entry.make(
            seq,
            turn,
            include_digest=config.include_trajectory_digest,
            size_of=self._size_of if state.metered else None,
        )
        budget = config.budget
        if budget.overflow_policy == "error" and not self._budget.fits_after_add(state, entry):
            raise MemoryBudgetExceeded("turn would take the memory over total_max_tokens")
        watermark.admit(state, entry, config)
        try:
            self._budget.enforce(state)
        finally:  # stored even when the estimator failed on the view, as by the reference
            self._changes += 1
            self._on_turn.emit(turn)
            if config.strategy == "rolling_summary":
                self._wake()


provider = mutant_provider("con001-seq-taken-before-await", SeqBeforeAwaitMemory)
