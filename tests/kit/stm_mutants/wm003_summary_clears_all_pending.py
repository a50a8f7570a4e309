"""WM-003 broken: a summary that lands clears *all* pending turns.

When a call succeeds, every pending turn is treated as covered by its summary, including
the turns evicted while the call ran (the summarizer never saw them): they are dropped by
the install that follows instead of staying pending for the next call.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

SLOW = "its failing checks wait their whole patience for the turns it dropped"
BREAKS = "WM-003"
COLLATERAL = {
    "WM-004": "the dropped turns never reach a successful summarizer call",
    "WM-006": "the turns the install drops are discarded without a summary covering them",
    "WM-007": "flush() waits forever for the dropped turns, which no call will cover",
}


class ClearAllPendingMemory(DefaultShortTermMemory):
    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        error = super()._reject_summary(state, batch, summary)
        if error is None and not batch.recovering:
            # MUTATION: the summary about to be installed "covers" every pending turn, so
            # the turns evicted during the call are dropped with the ones it was sent.
            state.pending = [e for e in state.pending if e.seq <= batch.through]
        return error


provider = mutant_provider("wm003-summary-clears-all-pending", ClearAllPendingMemory)
