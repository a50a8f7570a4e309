"""HLT-006 broken: a state loaded RECOVERING (saved while a recovery attempt ran) makes its
next attempt at once.

The load restarts the timer of a RETRY or DEGRADED state, as the reference does, but tests
``health is DEGRADED`` where the DEGRADED family (DEGRADED or RECOVERING) is meant: a
RECOVERING state keeps no timer and attempts recovery the moment it is loaded, however
recently its last attempt began; loaded again and again, it attempts once per load. Spec,
HLT-006: "the memory itself MUST attempt recovery (RECOVERING) at most once per
``degraded_retry_interval_s`` ... A state loaded DEGRADED does the same, its interval
counted from the load, so loading never brings an attempt sooner."
"""

from __future__ import annotations

from reference_impl.health import HealthMachine
from reference_impl.types import MemoryHealth

from . import mutant_provider
from ._util import with_health

BREAKS = "HLT-006"
COLLATERAL: dict[str, str] = {}


class RecoveringUntimedHealth(HealthMachine):
    __slots__ = ()

    def restart_timers(self, now: float) -> None:
        if self.state is MemoryHealth.RECOVERING:
            self.not_before = 0.0  # MUTATION: only DEGRADED counts its interval from the load
            return
        super().restart_timers(now)


provider = mutant_provider(
    "hlt006-loaded-recovering-attempts-at-once", with_health(RecoveringUntimedHealth)
)
