"""HLT-001 broken: ``health`` is a plain ``Enum``, not a ``str`` enum.

The backend reports health through an enum of its own with the right member values but
without the ``str`` mixin, so ``health.value`` reads as expected while ``health`` itself is
no ``str``: ``health == "healthy"`` is false and it does not format as its value.
"""

from __future__ import annotations

from enum import Enum

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-001"
COLLATERAL: dict[str, str] = {}


class Health(Enum):  # MUTATION: no str mixin
    HEALTHY = "healthy"
    RETRY = "retry"
    DEGRADED = "degraded"
    RECOVERING = "recovering"


class PlainEnumHealthMemory(DefaultShortTermMemory):
    @property
    def health(self) -> Health:  # type: ignore[override]
        return Health(self._state.health.state.value)


provider = mutant_provider("hlt001-health-plain-enum", PlainEnumHealthMemory)
