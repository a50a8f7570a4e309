"""BUD-008 broken: ``estimate_tokens()`` is memoized, and a load does not invalidate it.

The count is cached until the next ``add_turn`` or summarizer outcome; ``from_dict`` and
``hydrate`` replace the state but keep the cached count, so a memory whose estimate was
read before a load reports the replaced state's count until the next change. Spec,
BUD-008: "``estimate_tokens()`` MUST equal the estimator applied to the canonical JSON of
``get_llm_context()``."
"""

from __future__ import annotations

from typing import Any

from reference_impl.entries import MemoryState
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "BUD-008"
COLLATERAL = {
    "SER-002": "a memory whose estimate was read before from_dict reports the old count after it",
}


class MemoizedEstimateMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        self._memo: int | None = None
        super().__init__(**kwargs)

    def estimate_tokens(self) -> int:
        if self._memo is None:
            self._memo = super().estimate_tokens()
        return self._memo

    async def add_turn(self, turn: ConversationTurn) -> None:
        self._memo = None
        try:
            await super().add_turn(turn)
        finally:
            self._memo = None

    def _notify(self) -> None:
        self._memo = None
        super()._notify()

    def _install(self, loaded: MemoryState) -> None:
        memo = self._memo
        super()._install(loaded)
        self._memo = memo  # MUTATION: a load keeps the replaced state's count


provider = mutant_provider("bud008-estimate-cached-across-load", MemoizedEstimateMemory)
