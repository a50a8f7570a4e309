"""STR-001 broken: under strategy ``none`` with ``overflow_policy="error"``, ``add_turn``
measures the turn against ``total_max_tokens`` before noticing the strategy stores
nothing, and raises ``MemoryBudgetExceeded`` for a turn longer than the budget.

The error policy's atomic check was hoisted to the top of ``add_turn`` ("refuse before
doing anything"), above the strategy's early return. Spec, STR-001: "Strategy ``none``
MUST be a no-op: ``add_turn`` stores nothing, ``get_llm_context()`` returns ``{}``" --
a no-op does not raise; and BUD-009 says any budget fits ``none``'s view ``{}``.
Every other strategy and policy behaves as the reference.
"""

from __future__ import annotations

from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, MemoryBudgetExceeded

from . import mutant_provider

BREAKS = "STR-001"
COLLATERAL: dict[str, str] = {}


class NoneBudgetedMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        config = self._config
        budget = config.budget
        if (
            config.strategy == "none"
            and not self._closed
            and budget.overflow_policy == "error"
            and budget.total_max_tokens
        ):
            check_turn(turn)
            entry = Entry.make(
                self._state.next_seq,
                turn,
                include_digest=config.include_trajectory_digest,
                size_of=self._size_of,
            )
            # MUTATION: the error policy's check runs before strategy none's no-op
            if not self._budget.fits_after_add(self._state, entry):
                raise MemoryBudgetExceeded(
                    f"turn would take the memory over total_max_tokens={budget.total_max_tokens}"
                )
        await super().add_turn(turn)


provider = mutant_provider("str001-none-error-policy-refuses", NoneBudgetedMemory)
