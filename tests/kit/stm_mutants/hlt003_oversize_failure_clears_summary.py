"""HLT-003 broken: a summary refused as over budget (BUD-007) also clears the installed one.

The refused summary is "rolled back" to an empty summary instead of to the last good one, so
after an oversize reply the memory is in RETRY with no summary in its view. Other failures
(exceptions, malformed replies) keep the summary as the reference does.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-003"
COLLATERAL: dict[str, str] = {
    "WM-004": "the summary wiped by the failure is gone from the state too: a later call "
    "(a recovery, where the view shows no summary anyway) is sent previous_summary='', "
    "not the summary installed"
}


class RollbackToEmptyMemory(DefaultShortTermMemory):
    def _reject_summary(self, state: MemoryState, batch: watermark.Batch, summary: str):
        error = super()._reject_summary(state, batch, summary)
        if error is not None:
            state.set_summary("")  # MUTATION: rolled back to nothing, not to the last good one
        return error


provider = mutant_provider("hlt003-oversize-failure-clears-summary", RollbackToEmptyMemory)
