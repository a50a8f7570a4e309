"""HLT-002 broken: the backoff exponent counts every retry the memory ever made.

The memory keeps its own ``_retries`` counter for the backoff, incremented on every failure
that leads to RETRY and never reset on success: the first retry of a later failure episode
waits ``base * 2**k`` (k = retries so far in the memory's life), not ``base``.
"""

from __future__ import annotations

from typing import Any

from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-002"
COLLATERAL: dict[str, str] = {}


class LifetimeBackoffMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._retries = 0

    def _transition(self, change: Transition) -> None:
        if change[1] is MemoryHealth.RETRY:
            self._retries += 1  # MUTATION: never reset on success
            health = self._state.health
            health.not_before = self._now() + health.backoff_base_s * 2.0 ** (self._retries - 1)
        super()._transition(change)


provider = mutant_provider("hlt002-backoff-counter-not-reset", LifetimeBackoffMemory)
