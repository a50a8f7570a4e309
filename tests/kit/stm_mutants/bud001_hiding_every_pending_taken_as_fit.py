"""BUD-001 broken: hiding every pending turn is taken to make the view fit.

``_hide_pending`` searches for the fewest oldest pending turns to hide and reports whether
the view was measured to fit. Its last line reads ``fits_at <= end`` instead of
``fits_at < end``: when even one visible pending turn is too many, every pending turn is
hidden and the search reports "fits" without measuring, so trimming stops there, with
recent turns (or the summary) still over ``total_max_tokens``. The next trim that starts
with no visible pending turn evicts as usual.
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-001"
COLLATERAL: dict[str, str] = {}


class OffByOneHideBudget(Budget):
    __slots__ = ()

    def _hide_pending(self, state: MemoryState) -> bool:
        start, end = state.visible_from, len(state.pending)
        state.show_pending_from(start + 1)
        if start + 1 == end:
            return False
        if self.fits(state):
            return True
        known_over = start + 1
        fits_at = end
        shown = 1
        while end - shown > known_over:
            state.show_pending_from(end - shown)
            if not self.fits(state):
                known_over = end - shown
                break
            fits_at, shown = end - shown, shown * 2
        while fits_at - known_over > 1:
            middle = (known_over + fits_at) // 2
            state.show_pending_from(middle)
            if self.fits(state):
                fits_at = middle
            else:
                known_over = middle
        state.show_pending_from(fits_at)
        return fits_at <= end  # MUTATION: "every pending turn hidden" counts as measured to fit


provider = mutant_provider(
    "bud001-hiding-every-pending-taken-as-fit", with_budget(OffByOneHideBudget)
)
