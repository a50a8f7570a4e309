"""BUD-005 broken: ``truncate_summary`` cuts the summary at a word boundary.

The longest tail that fits is found, then its first, partial word is dropped too (the
tail starts after the first whitespace it contains; with none, the summary is dropped),
so the kept tail is shorter than the longest that fits whenever the cut falls inside a
word. ``truncate_oldest``'s last-resort shortening is unchanged.
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-005"
COLLATERAL: dict[str, str] = {}


class WordCutBudget(Budget):
    __slots__ = ()

    def _shorten_summary(self, state: MemoryState) -> None:
        text = state.summary
        super()._shorten_summary(state)
        if self.config.budget.overflow_policy != "truncate_summary":
            return
        kept = state.summary
        if kept and not text[len(text) - len(kept) - 1].isspace():
            # MUTATION: never start the summary mid-word
            parts = kept.split(None, 1)
            state.set_summary(parts[1] if len(parts) == 2 else "")


provider = mutant_provider("bud005-cut-at-word-boundary", with_budget(WordCutBudget))
