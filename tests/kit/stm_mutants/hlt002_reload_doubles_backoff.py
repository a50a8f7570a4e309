"""HLT-002 broken: a state loaded in RETRY waits the backoff of the retry *after* its next.

Loading restarts the retry timer from the load, as the spec has it, but computes the wait
for retry ``failures + 1`` (``base * 2**failures``) where the next retry is retry
``failures`` (``base * 2**(failures - 1)``): after one failed call, a loaded state retries
``2 * base`` after the load instead of ``base``. Spec, HLT-002: "the memory itself MUST
schedule retry *n* after ``retry_backoff_base_s * 2**(n-1)`` seconds ... A state loaded in
RETRY keeps its count of failed calls and schedules its next retry by itself, timed from
the load".
"""

from __future__ import annotations

from reference_impl.health import HealthMachine
from reference_impl.types import MemoryHealth

from . import mutant_provider
from ._util import with_health

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class LateReloadRetryHealth(HealthMachine):
    __slots__ = ()

    def restart_timers(self, now: float) -> None:
        super().restart_timers(now)
        if self.state is MemoryHealth.RETRY:
            # MUTATION: the wait of retry failures + 1
            self.not_before = now + self.backoff_base_s * 2.0 ** min(self.failures, 1000)


provider = mutant_provider("hlt002-reload-doubles-backoff", with_health(LateReloadRetryHealth))
