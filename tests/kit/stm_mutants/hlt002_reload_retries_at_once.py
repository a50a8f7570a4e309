"""HLT-002 broken: loading a RETRY state makes the next retry due at once.

"Timers do not cross processes, so retry now": every ``from_dict``/``hydrate`` of a state
in RETRY clears the backoff, however recently the last attempt failed. A memory reloaded
often (a worker that hydrates per request) retries once per load instead of once per
backoff, hammering a summarizer that is already failing.
"""

from __future__ import annotations

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class EagerRetryMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:
        super()._install(loaded)
        if loaded.health.state is MemoryHealth.RETRY:
            loaded.health.not_before = 0.0  # MUTATION: a retry due at once after a load


provider = mutant_provider("hlt002-reload-retries-at-once", EagerRetryMemory)
