"""BUD-007 broken: a summary of exactly ``summary_max_tokens`` tokens is refused.

The size test is written ``>=`` where the spec's limit is inclusive ("exceeds"), so a
summarizer asked for at most N tokens that returns exactly N sees every such summary
treated as a failure, and the memory retries and degrades for nothing.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-007"
COLLATERAL: dict[str, str] = {}


class AtLimitRefusedMemory(DefaultShortTermMemory):
    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        limit = self._config.budget.summary_max_tokens
        size = self._budget.meter.text_size(summary)
        if size >= limit:  # MUTATION: >= where the limit is inclusive
            return f"summary of {size} tokens reaches summary_max_tokens={limit}"
        return super()._reject_summary(state, batch, summary)


provider = mutant_provider("bud007-summary-at-the-limit-refused", AtLimitRefusedMemory)
