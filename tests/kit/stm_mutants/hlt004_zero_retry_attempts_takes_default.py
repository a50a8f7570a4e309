"""HLT-004 broken: ``retry_attempts=0`` is read as "not set" and takes the default of 3
(``config.retry_attempts or 3``), so a memory configured to degrade after its first
failed call retries three times first.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-004"
COLLATERAL: dict[str, str] = {}


def _fix(health) -> None:
    health.retry_attempts = health.retry_attempts or 3  # MUTATION: 0 is falsy


class Memory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _fix(self._state.health)

    def _install(self, loaded):
        _fix(loaded.health)
        super()._install(loaded)


provider = mutant_provider("hlt004-zero-retry-attempts-takes-default", Memory)
