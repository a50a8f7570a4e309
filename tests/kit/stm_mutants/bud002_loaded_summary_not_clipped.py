"""BUD-002 broken: ``from_dict`` installs a stored summary larger than
``summary_max_tokens`` as it is.

Summaries from the summarizer are size-checked as in the reference, but a loaded state's
summary is not clipped to ``summary_max_tokens`` (truncate policies).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-002"
COLLATERAL: dict[str, str] = {
    "BUD-001": "the stored text it puts back is also what the budget shortened to fit "
    "total_max_tokens: the loaded view is over the limit"
}


class UnclippedLoadMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(state)
        summary = state.get("summary")
        if isinstance(summary, str) and summary and not self._state.health.degraded:
            self._state.set_summary(summary)  # MUTATION: the stored text, unclipped


provider = mutant_provider("bud002-loaded-summary-not-clipped", UnclippedLoadMemory)
