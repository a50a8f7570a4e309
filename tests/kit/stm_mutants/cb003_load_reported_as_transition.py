"""CB-003 broken: ``from_dict`` reports the health it loads as a transition.

A state loaded with another health than the memory's runs ``on_health_changed(old, new)``
as if the summarizer had failed or recovered here. The state's transitions happened where
it was written, and were reported there: monitoring counts each twice, and a HEALTHY
memory loading a DEGRADED state reports a degradation that never happened.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory, MemoryState

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class LoadReportedMemory(DefaultShortTermMemory):
    def _install(self, loaded: MemoryState) -> None:
        old = self._state.health.state
        super()._install(loaded)
        if loaded.health.state is not old:
            self._transition((old, loaded.health.state))  # MUTATION: a load is reported


provider = mutant_provider("cb003-load-reported-as-transition", LoadReportedMemory)
