"""CB-001 broken: ``from_dict`` clears the ``on_turn_added`` queue ("turn events of the
replaced state are stale"), so the events of turns added just before the load and not yet
delivered are dropped: those stored turns are never reported.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    def _install(self, loaded):
        # MUTATION: a load forgets undelivered turn events of the replaced state
        self._on_turn._events.clear()
        super()._install(loaded)


provider = mutant_provider("cb001-from-dict-drops-undelivered-turn-events", Memory)
