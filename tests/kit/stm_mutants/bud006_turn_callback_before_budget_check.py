"""BUD-006 broken: under ``overflow_policy="error"``, ``on_turn_added`` runs for a refused turn.

The backend notifies observers first ("a turn arrived") and only then checks whether the
turn fits. A turn refused with ``MemoryBudgetExceeded`` leaves the view, the token count
and ``to_dict()`` as they were, but its callback has already been queued: an observer
that counts or persists turns records one the memory never stored.
"""

from __future__ import annotations

from reference_impl.callbacks import CallbackQueue
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "BUD-006"
COLLATERAL: dict[str, str] = {}


class NotifyFirstMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        queue = self._on_turn
        if self._closed or self._config.strategy == "none":
            await super().add_turn(turn)
            return
        check_turn(turn)
        queue.emit(turn)  # MUTATION: observers hear of the turn before the budget decides
        self._on_turn = CallbackQueue("on_turn_added", None)  # ... so it is not emitted twice
        try:
            await super().add_turn(turn)
        finally:
            self._on_turn = queue


provider = mutant_provider("bud006-turn-callback-before-budget-check", NotifyFirstMemory)
