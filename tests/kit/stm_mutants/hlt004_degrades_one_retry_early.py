"""HLT-004 broken: the memory degrades one retry early.

The first attempt is counted among the retries: with ``retry_attempts=2`` the memory
degrades when the first attempt and retry 1 have failed, and retry 2 is never made.
"""

from __future__ import annotations

from reference_impl.health import HealthMachine, Transition

from . import mutant_provider
from ._util import with_health

BREAKS = "HLT-004"
COLLATERAL: dict[str, str] = {}


class EarlyDegradingHealth(HealthMachine):
    __slots__ = ()

    def on_failure(self, now: float) -> Transition:
        self.retry_attempts -= 1  # MUTATION
        try:
            return super().on_failure(now)
        finally:
            self.retry_attempts += 1


provider = mutant_provider("hlt004-degrades-one-retry-early", with_health(EarlyDegradingHealth))
