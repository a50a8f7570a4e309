"""HLT-002 broken: a state loaded in RETRY waits retry 1's backoff, whatever its count.

The load keeps the count of failed calls, but times the next retry as
``retry_backoff_base_s`` from the load, without the exponent: a state saved after two
failed calls retries after ``base`` instead of ``2 * base``, sooner than the spec allows.
After a single failure the two agree, so only a reload after two failures shows it.
"""

from __future__ import annotations

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class BaseOnlyReloadMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:
        super()._install(loaded)
        health = loaded.health
        if health.state is MemoryHealth.RETRY:
            health.not_before = self._now() + health.backoff_base_s  # MUTATION: no exponent


provider = mutant_provider("hlt002-reload-forgets-backoff-exponent", BaseOnlyReloadMemory)
