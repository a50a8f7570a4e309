"""The summarizer health state machine (spec group HLT), as plain data.

    HEALTHY --failure--> RETRY --failure x retry_attempts--> DEGRADED
       ^                   |                                  |   ^
       +-----success-------+            interval elapsed -----+   | failure
       +------------------------success---- RECOVERING <------+---+

The memory asks this machine what to do next and reports outcomes to it; it holds no
asyncio objects, so every transition is unit-testable without a loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import MemoryHealth

__all__ = ["DEGRADED_STATES", "HealthMachine", "Transition"]

Transition = tuple[MemoryHealth, MemoryHealth]

#: The states in which the view shows recent turns only.
DEGRADED_STATES = (MemoryHealth.DEGRADED, MemoryHealth.RECOVERING)


@dataclass(slots=True)
class HealthMachine:
    retry_attempts: int
    backoff_base_s: float
    degraded_interval_s: float
    state: MemoryHealth = MemoryHealth.HEALTHY
    #: Consecutive failed calls since the last success (the first attempt counts).
    failures: int = 0
    #: Monotonic time before which no retry (RETRY) or recovery (DEGRADED) may start.
    not_before: float = 0.0

    @property
    def degraded(self) -> bool:
        """DEGRADED or RECOVERING: the view shows recent turns only."""
        return self.state in DEGRADED_STATES

    def on_success(self) -> Transition:
        old = self.state
        self.state = MemoryHealth.HEALTHY
        self.failures = 0
        self.not_before = 0.0
        return old, self.state

    def on_failure(self, now: float) -> Transition:
        old = self.state
        if old is MemoryHealth.RECOVERING:
            self.state = MemoryHealth.DEGRADED
            self.not_before = now + self.degraded_interval_s
            return old, self.state
        self.failures += 1
        if self.failures <= self.retry_attempts:
            self.state = MemoryHealth.RETRY
            self.not_before = now + self._retry_wait_s()
        else:
            self.state = MemoryHealth.DEGRADED
            self.not_before = now + self.degraded_interval_s
        return old, self.state

    def begin_recovery(self, now: float) -> Transition:
        old = self.state
        if old is not MemoryHealth.DEGRADED:
            raise RuntimeError(f"recovery starts from DEGRADED, not {old.value}")
        self.state = MemoryHealth.RECOVERING
        self.not_before = now + self.degraded_interval_s
        return old, self.state

    def restart_timers(self, now: float) -> None:
        """Time the next call from ``now``, as if the state had just been entered: for a
        loaded state, whose timers (monotonic times) do not cross processes. Loading a
        state again and again must not bring its retries or recoveries sooner
        (HLT-002, HLT-006)."""
        if self.state is MemoryHealth.RETRY:
            self.not_before = now + self._retry_wait_s()
        elif self.degraded:
            self.not_before = now + self.degraded_interval_s
        else:
            self.not_before = 0.0

    def _retry_wait_s(self) -> float:
        # HLT-002: retry n waits base * 2**(n-1). The exponent is capped: past 2**1000 a
        # float overflows, and any wait that long is already forever.
        return self.backoff_base_s * 2.0 ** min(self.failures - 1, 1000)

    def wait_s(self, now: float) -> float:
        """Seconds until the next call may start (0 when it may start now)."""
        return max(0.0, self.not_before - now)
