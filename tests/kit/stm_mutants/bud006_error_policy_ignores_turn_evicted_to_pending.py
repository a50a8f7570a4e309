"""BUD-006 broken: the ``error`` policy's check measures the prospective view without the
turn the new one evicts from recent into pending.

``fits_after_add`` builds recent as ``recent + [new]`` cut to the window, but measures
pending as it is: under ``rolling_summary`` the oldest recent turn moves to pending (and
stays visible), so the view after the add is one turn longer than the one measured. A
turn that takes the view over ``total_max_tokens`` by that evicted turn is accepted.
BUD-006: "``add_turn`` MUST raise ``MemoryBudgetExceeded`` when the resulting view would
exceed ``total_max_tokens``". Under ``truncation`` (the evicted turn is dropped) and while
the window is not full, the check is the reference's.
"""

from __future__ import annotations

from reference_impl.budget import Budget, _part
from reference_impl.entries import Entry, MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}


class ForgetsEvictedBudget(Budget):
    __slots__ = ()

    def fits_after_add(self, state: MemoryState, entry: Entry) -> bool:
        if not self.limit or not self._shows_summary(state):
            return super().fits_after_add(state, entry)
        self.start_metering(state)
        entry.measure(self.meter.size_of)
        window = [*state.recent, entry]
        kept = window[max(0, len(window) - self.config.budget.full_zone_turns) :]
        pending = state.pending[state.visible_from :]  # MUTATION: the evicted turn left out
        tokens = self.meter.view_tokens(state.summary_json, _part(pending), _part(kept))
        return tokens <= self.limit


provider = mutant_provider(
    "bud006-error-policy-ignores-turn-evicted-to-pending", with_budget(ForgetsEvictedBudget)
)
