"""BUD-006 broken: under ``overflow_policy="error"``, while the memory is in RETRY, a new
turn is measured without the installed summary.

``fits_after_add`` counts recent and every visible pending turn in HEALTHY and RETRY, but
the summary only in HEALTHY ("in RETRY the summary is about to be replaced"): the view
shows the last good summary in RETRY (HLT-003), so a turn that fits only without it is
accepted and the view ends over ``total_max_tokens``. Spec, BUD-006: "Policy ``error``:
``add_turn`` MUST raise ``MemoryBudgetExceeded`` when the resulting view would exceed
``total_max_tokens``". HEALTHY, DEGRADED and RECOVERING are measured as by the reference.
"""

from __future__ import annotations

from reference_impl.budget import Budget, _part
from reference_impl.entries import Entry, MemoryState
from reference_impl.types import MemoryHealth

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}


class StaleSummaryBudget(Budget):
    __slots__ = ()

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        if not self.limit:
            return True
        self.start_metering(state)
        entry.measure(self.meter.size_of)
        window = [*state.recent, entry]
        cut = max(0, len(window) - self.config.budget.full_zone_turns)
        evicted, kept = window[:cut], window[cut:]
        if not self._shows_summary(state):
            return self.meter.view_tokens(None, None, _part(kept)) <= self.limit
        pending = state.pending[state.visible_from :] + evicted
        # MUTATION: the summary counted only when HEALTHY
        summary = state.summary_json if state.health.state is MemoryHealth.HEALTHY else None
        tokens = self.meter.view_tokens(summary, _part(pending), _part(kept))
        return tokens <= self.limit


provider = mutant_provider("bud006-retry-summary-not-measured", with_budget(StaleSummaryBudget))
