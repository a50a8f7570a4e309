"""BUD-007 broken: a summary larger than ``summary_max_tokens`` is installed.

Only the ``error`` policy's total-budget test is applied to a landing summary; its own
size is never compared with ``summary_max_tokens``.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

SLOW = "two checks of an oversize summary each wait their whole patience for a failure"
BREAKS = "BUD-007"
COLLATERAL = {
    "BUD-002": "the oversize summary it installs exceeds summary_max_tokens",
    "HLT-007": "the spec states the same rule twice: an oversize summary is invalid output",
}


class OversizeSummaryMemory(DefaultShortTermMemory):
    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        # MUTATION: no summary_max_tokens test
        if self._config.budget.overflow_policy == "error" and not self._budget.fits_after_install(
            state, batch, summary
        ):
            return "summary would take the memory over total_max_tokens"
        return None


provider = mutant_provider("bud007-oversize-summary-installed", OversizeSummaryMemory)
