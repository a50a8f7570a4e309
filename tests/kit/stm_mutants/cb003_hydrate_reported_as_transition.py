"""CB-003 broken: ``hydrate`` (not ``from_dict``) reports the health it loads as a
transition from the memory's health before it ("a restarted worker tells monitoring
where it stands"). ``from_dict`` behaves as the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    async def hydrate(self, store, key) -> None:
        before = self._state.health.state
        await super().hydrate(store, key)
        self._transition((before, self._state.health.state))  # MUTATION


provider = mutant_provider("cb003-hydrate-reported-as-transition", Memory)
