"""WM-003 broken: installing a summary keeps the last turn its call was sent.

The install removes the pending turns *before* the batch's last seq (``seq < through``
where ``seq <= through`` is meant): a call sent several turns leaves the newest of them
pending, and the next call is sent it again. A call sent one turn is installed right, so
only a check whose call covers more than one turn sees it.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-003"
COLLATERAL = {
    "WM-004": "the turn kept is sent to a second successful call: delivered twice",
}


class KeepLastSentMemory(DefaultShortTermMemory):
    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        error = super()._reject_summary(state, batch, summary)
        if error is None and not batch.recovering and len(batch.entries) > 1:
            # MUTATION: the install covers the batch without its last turn.
            object.__setattr__(batch, "entries", batch.entries[:-1])
        return error


provider = mutant_provider("wm003-install-keeps-last-sent-turn", KeepLastSentMemory)
