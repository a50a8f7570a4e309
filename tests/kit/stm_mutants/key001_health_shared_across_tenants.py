"""KEY-001 broken: the summarizer health is shared by keys that differ only in tenant.

Turns, pending turns and summaries stay per key, but the health machine lives in a
class-level table keyed by ``(user_id, session_id)``: a failing summarizer on one tenant's
memory puts another tenant's memory into RETRY (and hides its view when DEGRADED).
"""

from __future__ import annotations

from typing import Any, ClassVar

from reference_impl.health import HealthMachine
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "KEY-001"
COLLATERAL: dict[str, str] = {}


class SharedHealthMemory(DefaultShortTermMemory):
    _health: ClassVar[dict[tuple[str, str], HealthMachine]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        key = self.key
        if key is not None:
            # MUTATION: one health machine per (user, session), whatever the tenant
            scope = (key.user_id, key.session_id)
            self._state.health = self._health.setdefault(scope, self._state.health)


provider = mutant_provider("key001-health-shared-across-tenants", SharedHealthMemory)
