"""HLT-006 broken: after a failed recovery the next one waits the retry backoff.

Entering DEGRADED waits ``degraded_retry_interval_s`` as it should, but a recovery attempt
that fails schedules the next one ``retry_backoff_base_s`` later, so a DEGRADED memory with
a short backoff hammers a broken summarizer.
"""

from __future__ import annotations

from typing import Any

from reference_impl.health import HealthMachine, Transition
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "HLT-006"
COLLATERAL: dict[str, str] = {}


class RetryPacedHealth(HealthMachine):
    def on_failure(self, now: float) -> Transition:
        change = super().on_failure(now)
        if change[0] is MemoryHealth.RECOVERING:
            # MUTATION: paced by the retry backoff, not by degraded_retry_interval_s
            self.not_before = now + self.backoff_base_s
        return change


class RetryPacedRecoveryMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cfg = self._config
        self._state.health = RetryPacedHealth(
            cfg.retry_attempts, cfg.retry_backoff_base_s, cfg.degraded_retry_interval_s
        )


provider = mutant_provider("hlt006-failed-recovery-backs-off-as-retry", RetryPacedRecoveryMemory)
