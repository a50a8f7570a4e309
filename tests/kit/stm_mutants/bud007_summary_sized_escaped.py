"""BUD-007 broken: a summary's size is measured on its JSON-escaped text (as the view's
canonical JSON spells it), not on the summary itself.

``summary_fits`` reuses the summary's JSON form (without its quotes): a summary with
newlines, quotes, backslashes or tabs is counted larger than ``estimator(summary)``, so
one within ``summary_max_tokens`` -- a summary made of lines, as LLM summaries are -- is
refused as a failed call. Summaries without such characters are sized as by the
reference. Spec, section 0: "size of a summary: 0 if the summary is ``""``, else
``estimator(summary)``"; BUD-007: only "a summary whose size exceeds
``summary_max_tokens`` ... MUST be treated as a summarizer failure".
"""

from __future__ import annotations

from reference_impl.budget import Budget
from reference_impl.tokens import json_string

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-007"
COLLATERAL: dict[str, str] = {}


class EscapedSizeBudget(Budget):
    __slots__ = ()

    def summary_fits(self, summary: str) -> bool:
        # MUTATION: sized as the view's JSON spells it (escapes counted)
        body = json_string(summary)[1:-1] if summary else ""
        return self.meter.text_size(body) <= self.config.budget.summary_max_tokens


provider = mutant_provider("bud007-summary-sized-escaped", with_budget(EscapedSizeBudget))
