"""HLT-004 broken: a successful call in RETRY returns to HEALTHY only once no turn is pending.

"Stay in RETRY until caught up": when a retry succeeds while turns evicted during it are
still pending, the memory stays RETRY (its failure count kept, the next call due at once)
and becomes HEALTHY only with a success that leaves nothing pending. Spec, HLT-004: "A
success in RETRY MUST return to HEALTHY."
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.entries import MemoryState
from reference_impl.health import Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-004"
COLLATERAL: dict[str, str] = {}


class CatchUpRetryMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._failures_before = 0

    def _reject_summary(
        self, state: MemoryState, batch: watermark.Batch, summary: str
    ) -> str | None:
        self._failures_before = state.health.failures
        return super()._reject_summary(state, batch, summary)

    def _transition(self, change: Transition) -> None:
        health = self._state.health
        if change == (MemoryHealth.RETRY, MemoryHealth.HEALTHY) and self._state.pending:
            # MUTATION: still RETRY while turns are pending
            health.state = MemoryHealth.RETRY
            health.failures = self._failures_before
            health.not_before = 0.0
            return
        super()._transition(change)


provider = mutant_provider("hlt004-retry-success-stays-retry", CatchUpRetryMemory)
