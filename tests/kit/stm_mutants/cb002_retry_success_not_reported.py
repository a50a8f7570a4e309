"""CB-002 broken: a summary installed by a retry (or a recovery) is not reported.

Each completed call notifies observers of one event: the health transition if the call
made one, else the summary update. A successful retry installs a summary *and* returns to
HEALTHY; only the transition reaches ``on_health_changed``, and ``on_summary_updated``
never hears of that summary. Summaries installed by first attempts are reported once each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from reference_impl.callbacks import CallbackQueue
from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class _SummaryEvents(CallbackQueue):
    def __init__(
        self, callback: Callable[..., Awaitable[None]] | None, skip: Callable[[], bool]
    ) -> None:
        super().__init__("on_summary_updated", callback)
        self._skip = skip

    def emit(self, *args: Any) -> None:
        if self._skip():
            return  # MUTATION: the call already reported its health change instead
        super().emit(*args)


class OneEventPerCallMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._health_reported = False
        self._on_summary = _SummaryEvents(
            self._config.on_summary_updated, lambda: self._health_reported
        )

    def _transition(self, change: Transition) -> None:
        super()._transition(change)
        self._health_reported = change[0] is not change[1]


provider = mutant_provider("cb002-retry-success-not-reported", OneEventPerCallMemory)
