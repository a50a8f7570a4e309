"""HLT-002 broken: ``flush()`` in RETRY makes the next retry due at once.

"A caller that flushes wants its turns summarized now": ``flush()`` clears the RETRY
backoff and wakes the worker, which retries immediately instead of
``retry_backoff_base_s * 2**(n-1)`` seconds after the failure. A caller that flushes
before every persist (the documented pattern) turns the exponential backoff into one
retry per flush against a summarizer that is already failing. HLT-002: "the memory itself
MUST schedule retry *n* after ``retry_backoff_base_s * 2**(n-1)`` seconds". Without a
flush in RETRY the timing is the reference's.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class EagerFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        health = self._state.health
        if health.state is MemoryHealth.RETRY and health.not_before > 0:
            health.not_before = 0.0  # MUTATION: a flush kicks the retry now
            self._notify()  # wakes a worker sleeping out the backoff
        await super().flush()


provider = mutant_provider("hlt002-flush-hastens-retry", EagerFlushMemory)
