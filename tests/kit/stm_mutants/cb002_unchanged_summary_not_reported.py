"""CB-002 broken: an installed summary equal to the previous one is not reported.

"Nothing changed, nothing to tell": ``on_summary_updated`` is skipped when the new summary
text equals the old one, although a summary was installed (and the turns it covers left
pending). An application persisting on each summary misses those installs.
"""

from __future__ import annotations

from typing import Any

from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class _ChangedOnly(CallbackQueue):
    def emit(self, *args: Any) -> None:
        old, new = args
        if old == new:
            return  # MUTATION: an unchanged summary is not reported
        super().emit(*args)


class ChangedOnlyMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_summary = _ChangedOnly("on_summary_updated", self._config.on_summary_updated)


provider = mutant_provider("cb002-unchanged-summary-not-reported", ChangedOnlyMemory)
