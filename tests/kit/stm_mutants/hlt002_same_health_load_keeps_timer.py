"""HLT-002 broken: loading a RETRY state into a memory that is itself in RETRY keeps the
memory's running retry timer ("the health did not change, so neither does the timer"),
instead of timing the loaded state's next retry from the load with its own count. A
memory whose retry was due soon retries the loaded state sooner than its backoff.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    def _install(self, loaded):
        old = self._state.health
        super()._install(loaded)
        if old.state is MemoryHealth.RETRY and loaded.health.state is MemoryHealth.RETRY:
            loaded.health.not_before = old.not_before  # MUTATION: the old timer runs on


provider = mutant_provider("hlt002-same-health-load-keeps-timer", Memory)
