"""WM-003 broken: the install takes the pending turns left, lets the loop run, then writes
them back.

When a call returns, the worker takes the pending turns its summary does not cover, then
measures the summary in slices, letting the event loop run between them (as one would for a
long summary and a slow BPE estimator), and then writes those turns back as the pending
list: a turn evicted by an ``add_turn`` in between is overwritten away, although no summary
covers it.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.entries import Entry, MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-003"
COLLATERAL = {
    "WM-004": "the turns the install overwrites never reach a successful summarizer call",
    "WM-006": "the turns the install overwrites are discarded without a summary covering them",
    "WM-007": "flush() waits for the overwritten turns, which no call will cover",
}

#: Measured in this many slices, the loop running between them.
SLICES = 3


class YieldingInstallMemory(DefaultShortTermMemory):
    _left: list[Entry] | None = None

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summary, error = await super()._call(batch)
        if error is None and not batch.recovering:
            state = self._state
            self._left = [e for e in state.pending if e.seq > batch.through]
            for _ in range(SLICES):  # MUTATION: the loop runs between taking and writing back
                await asyncio.sleep(0)
        return summary, error

    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        left, self._left = self._left, None
        error = super()._reject_summary(state, batch, summary)
        if error is None and left is not None:
            state.pending = [e for e in state.pending if e.seq <= batch.through] + left
            state.show_all_pending()
        return error


provider = mutant_provider("wm003-install-yields-before-cut", YieldingInstallMemory)
