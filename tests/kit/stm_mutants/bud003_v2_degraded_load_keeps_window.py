"""BUD-003 broken: a version-2 ``rolling_summary`` state saved DEGRADED (or RECOVERING) is loaded
with all its recent turns, whatever this memory's ``full_zone_turns``.

Loading into a smaller window evicts the oldest recent turns; in DEGRADED they would go to
the bounded backlog, where a full one drops them, so the loader keeps them in recent
("never lose a turn on load") -- the next ``add_turn`` then evicts them. HEALTHY and
RETRY states, and ``truncation`` states, are brought within the window as by the
reference, as are PenguiFlow version-1 states (upgraded by a separate path); the
token budget still applies. Spec, BUD-003: "Recent MUST hold at most
``full_zone_turns`` turns" (section 10: "a state loaded into a smaller window is brought
within it").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from reference_impl import schema
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "BUD-003"
COLLATERAL: dict[str, str] = {}


def _saved_degraded(state: Any) -> bool:
    return (
        isinstance(state, Mapping)
        and state.get("version") == 2
        and state.get("health") in ("degraded", "recovering")
    )


class Memory(DefaultShortTermMemory):
    def _wide(self) -> Any:
        config = self._config
        # MUTATION: no window on load for a degraded state
        return dataclasses.replace(
            config, budget=dataclasses.replace(config.budget, full_zone_turns=10**9)
        )

    def from_dict(self, state: Mapping[str, Any]) -> None:
        if self._config.strategy == "rolling_summary" and _saved_degraded(state):
            self._install(schema.load(state, self._wide(), self._budget, self._state.key))
            return
        super().from_dict(state)

    async def afrom_dict(self, state: Mapping[str, Any]) -> None:
        if self._config.strategy == "rolling_summary" and _saved_degraded(state):
            loaded = schema.run_steps(
                schema.load_steps(state, self._wide(), self._budget, self._state.key)
            )
            self._install(loaded)
            return
        await super().afrom_dict(state)


provider = mutant_provider("bud003-v2-degraded-load-keeps-window", Memory)
