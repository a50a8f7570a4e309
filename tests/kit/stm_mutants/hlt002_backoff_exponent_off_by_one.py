"""HLT-002 broken: retry *n* waits ``retry_backoff_base_s * 2**(n-2)``: half as long.

The exponent counts retries from 0 where the failure count starts at 1 (the first attempt
counts), so every backoff is half of what the spec gives: retry 1 comes after half of
``retry_backoff_base_s``, retry 2 after the base, and so on. Recovery pacing in DEGRADED
is unchanged.
"""

from __future__ import annotations

from typing import Any

from reference_impl.health import HealthMachine, Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class HalfBackoffHealth(HealthMachine):
    def on_failure(self, now: float) -> Transition:
        change = super().on_failure(now)
        if change[1] is MemoryHealth.RETRY:
            # MUTATION: 2**(failures - 2) where 2**(failures - 1) is meant
            self.not_before = now + self.backoff_base_s * 2 ** (self.failures - 2)
        return change


class HalfBackoffMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        old = self._state.health
        self._state.health = HalfBackoffHealth(
            old.retry_attempts, old.backoff_base_s, old.degraded_interval_s
        )


provider = mutant_provider("hlt002-backoff-exponent-off-by-one", HalfBackoffMemory)
