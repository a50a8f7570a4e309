"""SER-002 broken: a memory restored from a RETRY state comes back HEALTHY.

``from_dict`` loads everything, then resets RETRY (and its failure count) to HEALTHY, so
``health`` differs from the memory that was saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL = {
    "SER-004": "a PenguiFlow version-1 state in RETRY loads as HEALTHY",
}


class RetryForgottenMemory(DefaultShortTermMemory):
    def from_dict(self, state: Mapping[str, Any]) -> None:
        super().from_dict(state)
        health = self._state.health
        if health.state is MemoryHealth.RETRY:
            health.state, health.failures = MemoryHealth.HEALTHY, 0  # MUTATION


provider = mutant_provider("ser002-retry-restored-as-healthy", RetryForgottenMemory)
