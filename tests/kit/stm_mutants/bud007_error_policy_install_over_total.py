"""BUD-007 broken (``error`` policy): a summary that would push the view over
``total_max_tokens`` is installed anyway.

Only the summary's own size is compared with ``summary_max_tokens``; under
``overflow_policy="error"`` its installation is not checked against the total budget, so
the view ends up over ``total_max_tokens`` (nothing trims under ``error``).
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-007"
COLLATERAL: dict[str, str] = {}


class OverTotalInstallMemory(DefaultShortTermMemory):
    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        if not self._budget.summary_fits(summary):
            return "summary exceeds summary_max_tokens"
        return None  # MUTATION: no fits_after_install test under the error policy


provider = mutant_provider("bud007-error-policy-install-over-total", OverTotalInstallMemory)
