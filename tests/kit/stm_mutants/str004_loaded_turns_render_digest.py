"""STR-004 broken: turns loaded by ``from_dict``/``hydrate`` render their trajectory
digest whenever they have one, even with ``include_trajectory_digest=False`` ("the stored
record says it has one"). Turns added at run time follow the setting.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "STR-004"
COLLATERAL = {
    "SER-002": "a round trip through a memory with include_trajectory_digest=False shows "
    "digests its turns did not show before it, so from_dict(to_dict()) changes the view",
}


class Memory(DefaultShortTermMemory):
    def _load_config(self):
        # MUTATION: loads always include digests
        return dataclasses.replace(self._config, include_trajectory_digest=True)

    def from_dict(self, state: Any) -> None:
        self._install(schema.load(state, self._load_config(), self._budget, self._state.key))

    async def afrom_dict(self, state: Any) -> None:
        steps = schema.load_steps(state, self._load_config(), self._budget, self._state.key)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                loaded = done.value
                break
            await asyncio.sleep(0)
        self._install(loaded)


provider = mutant_provider("str004-loaded-turns-render-digest", Memory)
