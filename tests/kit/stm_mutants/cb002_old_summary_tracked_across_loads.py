"""CB-002 broken: ``on_summary_updated``'s ``old`` is the ``new`` of the previous report,
tracked by the callback queue, not the summary the install replaced. After ``from_dict``
loads a state with a summary, the first install reports ``old`` as the summary reported
before the load ("" for a fresh memory), not the loaded summary it replaced.
"""

from __future__ import annotations

from typing import Any

from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class _TrackingQueue(CallbackQueue):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._last = ""

    def emit(self, old: str, new: str) -> None:  # type: ignore[override]
        # MUTATION: old is the last reported new, not the summary replaced
        old, self._last = self._last, new
        super().emit(old, new)


class Memory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_summary = _TrackingQueue("on_summary_updated", self._config.on_summary_updated)


provider = mutant_provider("cb002-old-summary-tracked-across-loads", Memory)
