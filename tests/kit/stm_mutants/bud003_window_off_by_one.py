"""BUD-003 broken: the recent window is one turn wider than ``full_zone_turns``.

Turns are admitted with ``full_zone_turns + 1`` as the window (the classic ``>`` vs ``>=``
slip), so recent holds one turn too many; everything else uses the configured window.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "BUD-003"
COLLATERAL = {
    "SER-002": (
        "from_dict() applies the configured window, so a restored memory shows one recent "
        "turn fewer than the one it was saved from"
    ),
}


class WideWindowMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        budget = self._config.budget
        self._admit_config = dataclasses.replace(
            self._config,
            # MUTATION: one turn more than configured
            budget=dataclasses.replace(budget, full_zone_turns=budget.full_zone_turns + 1),
        )

    async def add_turn(self, turn: ConversationTurn) -> None:
        # add_turn never suspends before it returns, so the swap cannot leak to other calls.
        config, self._config = self._config, self._admit_config
        try:
            await super().add_turn(turn)
        finally:
            self._config = config


provider = mutant_provider("bud003-window-off-by-one", WideWindowMemory)
