"""BUD-004 broken: under ``truncation``, a view of exactly ``total_max_tokens`` tokens is
trimmed further.

The truncation strategy's budget loop runs ``while tokens >= limit``: a view that fits
with nothing to spare loses its oldest recent turn. ``rolling_summary`` budgets are
unchanged.
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.entries import MemoryState

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-004"
COLLATERAL: dict[str, str] = {}


class ExactLimitBudget(Budget):
    __slots__ = ()

    def fits(self, state: MemoryState) -> bool:
        if self.limit and self.config.strategy == "truncation":
            return self.tokens(state) < self.limit  # MUTATION: < instead of <=
        return super().fits(state)


provider = mutant_provider("bud004-truncation-evicts-at-exact-limit", with_budget(ExactLimitBudget))
