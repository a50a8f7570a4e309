"""HLT-002 broken: the retry backoff is timed from when the failed call started.

Retry n is due ``retry_backoff_base_s * 2**(n-1)`` after call n *failed*; this memory
counts from the call's start. A call that fails after running longer than the backoff (a
slow timeout from the model's API) is retried the moment it fails, with no backoff at all.
Summarizers that fail at once cannot tell the two apart.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class CallStartBackoffMemory(DefaultShortTermMemory):
    _started: float | None = None

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        started = self._now()
        outcome = await super()._call(batch)
        self._started = started
        return outcome

    def _transition(self, change: Transition) -> None:
        health = self._state.health
        if change[1] is MemoryHealth.RETRY and self._started is not None:
            # MUTATION: the wait counts from the start of the call that failed.
            health.not_before = self._started + health._retry_wait_s()
        super()._transition(change)


provider = mutant_provider("hlt002-backoff-timed-from-call-start", CallStartBackoffMemory)
