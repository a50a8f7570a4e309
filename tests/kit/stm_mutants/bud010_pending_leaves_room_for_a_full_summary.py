"""BUD-010 broken: under ``truncate_oldest``, the visible pending run leaves room for a
summary of ``summary_max_tokens``.

While pending turns are shown, the budget counts the summary as if it were as long as it
may grow (``summary_max_tokens``) rather than as it is, "so the next summary fits": fewer
pending turns are shown than fit. Recent turns and the summary are trimmed as before (the
reservation applies only while a pending turn is visible), and ``truncate_summary`` is
unchanged.
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-010"
COLLATERAL: dict[str, str] = {}


class ReservingBudget(Budget):
    __slots__ = ()

    def fits(self, state: MemoryState) -> bool:
        if not self.limit:
            return True
        tokens = self.tokens(state)
        if (
            self.config.budget.overflow_policy == "truncate_oldest"
            and self._shows_summary(state)
            and state.visible_from < len(state.pending)
        ):
            # MUTATION: reserve room for the summary to grow to its limit
            room = self.config.budget.summary_max_tokens - self.meter.text_size(state.summary)
            tokens += max(0, room)
        return tokens <= self.limit


provider = mutant_provider(
    "bud010-pending-leaves-room-for-a-full-summary", with_budget(ReservingBudget)
)
