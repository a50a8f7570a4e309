"""HLT-004 broken: the memory makes one retry too many before it degrades.

After the first attempt and ``retry_attempts`` retries have failed it retries once more;
with ``retry_attempts=0`` the first failure leads to a retry instead of DEGRADED.
"""

from __future__ import annotations

from reference_impl.health import HealthMachine, Transition

from . import mutant_provider
from ._util import with_health

BREAKS = "HLT-004"
COLLATERAL: dict[str, str] = {}


class LateDegradingHealth(HealthMachine):
    __slots__ = ()

    def on_failure(self, now: float) -> Transition:
        self.retry_attempts += 1  # MUTATION
        try:
            return super().on_failure(now)
        finally:
            self.retry_attempts -= 1


provider = mutant_provider("hlt004-degrades-one-retry-late", with_health(LateDegradingHealth))
