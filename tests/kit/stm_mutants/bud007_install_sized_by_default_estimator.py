"""BUD-007 broken: a summarizer's summary is checked against ``summary_max_tokens`` with the
default estimator (``len // 4 + 1``), whatever ``token_estimator`` is configured.

"A cheap pre-check before install": the configured estimator measures views and clips
loaded summaries as by the reference, but the size test that decides whether a new
summary is a failed call uses the default one. With an estimator that counts more tokens
than ``len // 4 + 1`` (a word or character counter, a BPE tokenizer on dense text), a
summary over the limit is installed. Spec, BUD-007: "A summary whose size exceeds
``summary_max_tokens`` ... MUST be treated as a summarizer failure", where "size of a
summary" is ``estimator(summary)`` and the estimator is ``config.token_estimator``.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.budget import Budget
from reference_impl.entries import MemoryState
from reference_impl.types import default_token_estimator

from . import mutant_provider
from ._util import with_budget

BREAKS = "BUD-007"
COLLATERAL = {
    "BUD-002": "the summary installed is over summary_max_tokens by the configured estimator",
}


class DefaultSizedInstallBudget(Budget):
    __slots__ = ()

    def _refuse_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        # MUTATION: not the configured estimator
        size = default_token_estimator(summary) if summary else 0
        if size > self.config.budget.summary_max_tokens:
            return f"summary of {size} tokens exceeds summary_max_tokens"
        if self.config.budget.overflow_policy == "error" and not self.fits_after_install(
            state, batch, summary
        ):
            return "summary would take the memory over total_max_tokens"
        return None


provider = mutant_provider(
    "bud007-install-sized-by-default-estimator", with_budget(DefaultSizedInstallBudget)
)
