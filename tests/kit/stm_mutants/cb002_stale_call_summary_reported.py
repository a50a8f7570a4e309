"""CB-002 broken: a summary whose call ``from_dict`` made stale is reported to
``on_summary_updated`` although it is never installed.

The memory reports each summary the summarizer returns as soon as the call ends, then
drops it if the state was replaced during the call (WM-004, as the reference does). The
dropped summary was never installed, yet observers are told ``(old, new)`` for it. Spec,
CB-002: "``on_summary_updated(old, new)`` MUST run once per installed summary."
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class EagerSummaryReportMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        state = self._state
        summary, error = await super()._call(batch)
        if error is None and self._state is not state and summary is not None:
            # MUTATION: reported on return, before the worker drops the stale outcome
            self._on_summary.emit(batch.previous_summary, summary)
        return summary, error


provider = mutant_provider("cb002-stale-call-summary-reported", EagerSummaryReportMemory)
