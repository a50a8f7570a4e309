"""WM-002 broken: with ``full_zone_turns=0`` a turn never becomes pending.

Under ``rolling_summary`` with no recent window, ``add_turn`` checks the turn and returns:
there is no window to admit it to, so it is neither recent nor pending, and no summary
ever covers it.
"""

from __future__ import annotations

from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "WM-002"
COLLATERAL: dict[str, str] = {}


class ZeroWindowMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        cfg = self._config
        if cfg.strategy == "rolling_summary" and not cfg.budget.full_zone_turns:
            check_turn(turn)
            return  # MUTATION: no window to admit it to, so the turn is not kept at all
        await super().add_turn(turn)


provider = mutant_provider("wm002-zero-window-drops-turns", ZeroWindowMemory)
