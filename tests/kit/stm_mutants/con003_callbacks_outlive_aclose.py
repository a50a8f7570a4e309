"""CON-003 broken: ``aclose()`` leaves callback tasks running.

The summarizer worker is cancelled as in the reference, but the callback queues are
detached instead of closed, so a slow ``on_turn_added`` keeps running after ``aclose()``.
"""

from __future__ import annotations

from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class CallbacksOutliveCloseMemory(DefaultShortTermMemory):
    async def aclose(self) -> None:
        # MUTATION: the running callback queues are detached, never cancelled
        self._on_turn = self._on_summary = self._on_health = CallbackQueue("detached", None)
        await super().aclose()


provider = mutant_provider("con003-callbacks-outlive-aclose", CallbacksOutliveCloseMemory)
