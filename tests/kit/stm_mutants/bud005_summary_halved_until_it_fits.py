"""BUD-005 broken: ``truncate_summary`` drops the older half of the summary at a time.

The shortening loop keeps ``text[len(text) // 2:]`` and measures again, until the view
fits (or the summary is empty). It keeps the newest text and terminates, but it cuts far
more than needed: a summary one token too long loses half its text, where the longest
tail that fits is kept by the reference. BUD-005: "shorten the summary first (keeping its
newest text)"; BUD-004: "Shortening keeps the longest tail of the summary with which the
view fits (BUD-005 too ...)". ``truncate_oldest`` shortens as the reference does.
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-005"
COLLATERAL: dict[str, str] = {}


class HalvingBudget(Budget):
    __slots__ = ()

    def _shorten_summary(self, state: MemoryState) -> None:
        if self.config.budget.overflow_policy != "truncate_summary":
            super()._shorten_summary(state)
            return
        text = state.summary
        state.set_summary(text[len(text) // 2 :] if len(text) > 1 else "")  # MUTATION


provider = mutant_provider("bud005-summary-halved-until-it-fits", with_budget(HalvingBudget))
