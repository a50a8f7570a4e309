"""BUD-007 broken: a summary is measured against ``summary_max_tokens`` with its
surrounding whitespace stripped.

"Padding is not content": ``summary_fits`` measures ``summary.strip()``. A summary that
is within the limit only without its leading/trailing whitespace (an LLM reply padded
with blank lines, an indented block) is accepted and installed as returned, though its size
-- ``estimator(summary)``, whitespace included -- exceeds the limit. BUD-007: "A summary
whose size exceeds ``summary_max_tokens`` ... MUST be treated as a summarizer failure".
Summaries without surrounding whitespace are measured exactly.
"""

from __future__ import annotations

from reference_impl.budget import Budget

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-007"
COLLATERAL = {
    "BUD-002": "the oversize summary it installs exceeds summary_max_tokens",
    "HLT-007": "the spec states the same rule twice: an oversize summary is invalid output",
}


class StrippedSizeBudget(Budget):
    __slots__ = ()

    def summary_fits(self, summary: str) -> bool:
        return super().summary_fits(summary.strip())  # MUTATION: whitespace not counted


provider = mutant_provider("bud007-summary-measured-stripped", with_budget(StrippedSizeBudget))
