"""HLT-002 broken: a failed call is retried only when the next ``add_turn`` comes along.

The summarizer worker does not sleep through the retry backoff: finding itself in RETRY
before the backoff has elapsed, it simply ends. Nothing schedules the retry, so a quiet
conversation stays in RETRY until another turn (after the backoff) restarts the worker.
"""

from __future__ import annotations

from typing import Any

from reference_impl.health import HealthMachine
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

SLOW = "each check that waits for a retry waits its whole patience"
BREAKS = "HLT-002"
COLLATERAL = {
    "HLT-004": (
        "retries that never run never run out: the memory stays in RETRY instead of "
        "reaching DEGRADED"
    ),
}


class _Parked(Exception):
    """Ends the worker where the reference would sleep until the retry is due."""


class ParkingHealth(HealthMachine):
    __slots__ = ()

    def wait_s(self, now: float) -> float:
        delay = super().wait_s(now)
        if delay > 0 and self.state is MemoryHealth.RETRY:
            raise _Parked  # MUTATION: no timer for the retry
        return delay


class RetryOnAddTurnMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        old = self._state.health
        self._state.health = ParkingHealth(
            old.retry_attempts, old.backoff_base_s, old.degraded_interval_s
        )

    async def _work(self) -> None:
        try:
            await super()._work()
        except _Parked:
            return  # the worker is gone; only add_turn (or flush) starts a new one


provider = mutant_provider("hlt002-retry-waits-for-add-turn", RetryOnAddTurnMemory)
