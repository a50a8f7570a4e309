"""CB-002 broken: ``on_summary_updated`` is called as ``(new, old)``.

The callback runs once per installed summary, but with its arguments the wrong way round.
"""

from __future__ import annotations

from typing import Any

from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class SwappedSummaryCallbackMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        callback = self._config.on_summary_updated
        if callback is not None:

            async def updated(old: str, new: str) -> None:
                await callback(new, old)  # MUTATION: new first, old second

            self._on_summary = CallbackQueue("on_summary_updated", updated)


provider = mutant_provider("cb002-summary-callback-arguments-swapped", SwappedSummaryCallbackMemory)
