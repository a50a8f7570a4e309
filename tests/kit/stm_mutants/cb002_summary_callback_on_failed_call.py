"""CB-002 broken: a failed summarizer call is reported through ``on_summary_updated``.

Every completed call fires the callback: a successful one with ``(old, new)``, a failed one
with ``(old, old)``, as if the summary had been "updated" to itself. The summaries
installed are still reported once each, in order.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class FailureReportingMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summary, error = await super()._call(batch)
        if error is not None:
            # MUTATION: a failed call is reported as an update keeping the old summary
            self._on_summary.emit(batch.previous_summary, batch.previous_summary)
        return summary, error


provider = mutant_provider("cb002-summary-callback-on-failed-call", FailureReportingMemory)
