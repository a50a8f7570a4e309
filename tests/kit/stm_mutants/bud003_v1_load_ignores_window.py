"""BUD-003 broken: a PenguiFlow v1 state is loaded without applying this memory's window.

The v2 path of ``from_dict`` brings the loaded turns within ``full_zone_turns``; the v1
migration path takes the v1 ``turns`` as recent as they are. A v1 state with more turns
than the window shows them all until the next ``add_turn`` evicts. Version 2 states load
as by the reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-003"
COLLATERAL: dict[str, str] = {}


class V1WindowMemory(DefaultShortTermMemory):
    def _v1_config(self, state: Any) -> Any:
        if isinstance(state, Mapping) and state.get("version") == 1:
            budget = self._config.budget
            return dataclasses.replace(
                self._config, budget=dataclasses.replace(budget, full_zone_turns=10**6)
            )
        return None

    def from_dict(self, state: Mapping[str, Any]) -> None:
        wide = self._v1_config(state)
        if wide is None:
            return super().from_dict(state)
        config, self._config = self._config, wide  # MUTATION: no window on the v1 path
        try:
            super().from_dict(state)
        finally:
            self._config = config

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        if self._v1_config(state) is None:
            return await super().afrom_dict(state)
        self.from_dict(state)


provider = mutant_provider("bud003-v1-load-ignores-window", V1WindowMemory)
