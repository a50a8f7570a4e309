"""CB-001 broken: a turn equal to the one added just before it is stored but not reported.

"Debounce duplicate notifications" (a client that retries a request re-records the same
turn): ``on_turn_added`` is skipped when the turn equals the last one reported. The memory
stores the turn twice, as the reference does (a repeated "ok" is another turn, WM-003), but
observers hear of it once. Distinct turns are reported as the reference reports them.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class DebounceMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last_reported: ConversationTurn | None = None
        emit = self._on_turn.emit

        def debounced(turn: ConversationTurn) -> None:
            if self._last_reported is not None and turn == self._last_reported:
                return  # MUTATION: a repeated turn is not reported again
            self._last_reported = turn
            emit(turn)

        self._on_turn.emit = debounced  # type: ignore[method-assign]


provider = mutant_provider("cb001-repeated-turn-reported-once", DebounceMemory)
