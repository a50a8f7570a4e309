"""BUD-007 broken: a summary larger than ``summary_max_tokens`` is installed.

Only the ``error`` policy's total-budget test is applied to a landing summary; its own
size is never compared with ``summary_max_tokens``.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-007"
COLLATERAL = {
    "HLT-007": "an oversize summary is one of the invalid outputs of HLT-007; the BUD-007 "
    "check is marked HLT-007 too",
    "BUD-002": "an installed oversize summary exceeds summary_max_tokens",
    "BUD-001": "marked on the budget-invariant check that reports BUD-002",
    "BUD-003": "marked on the budget-invariant check that reports BUD-002",
    "BUD-008": "marked on the budget-invariant check that reports BUD-002",
}
SUITE_FILES = ("test_budget.py",)
SELECT = None


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
