"""STR-001 broken: strategy ``none`` still records turns and shows them.

Under ``none`` every added turn is kept and, once there is one, ``get_llm_context()``
returns it as ``{"conversation_memory": {"recent_turns": [...]}}`` instead of ``{}``.
"""

from __future__ import annotations

from typing import Any

from reference_impl.entries import render_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "STR-001"
COLLATERAL: dict[str, str] = {}


class NoneKeepsTurnsMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._none_turns: list[dict[str, Any]] = []

    async def add_turn(self, turn: ConversationTurn) -> None:
        await super().add_turn(turn)
        if self._config.strategy == "none":
            # MUTATION: strategy none is not a no-op
            self._none_turns.append(
                render_turn(turn, include_digest=self._config.include_trajectory_digest)
            )

    def _view(self) -> dict[str, Any]:
        if self._config.strategy == "none" and self._none_turns:
            return {"conversation_memory": {"recent_turns": list(self._none_turns)}}
        return super()._view()


provider = mutant_provider("str001-none-keeps-turns", NoneKeepsTurnsMemory)
