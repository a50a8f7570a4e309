"""CB-001 broken: ``on_turn_added`` runs only once the budget has been enforced.

"Tell observers about a turn once it made it through budgeting": the callback is emitted
after ``Budget.enforce`` returns, not in its ``finally``. When the configured
``token_estimator`` raises while the view is measured, the turn is nevertheless stored (it
is in ``recent``, ``to_dict()`` writes it, the next turn's budgeting counts it) and the
error passes on to the caller, but ``on_turn_added`` never runs for it. CB-001:
"``on_turn_added(turn)`` MUST run once per stored turn". With an estimator that does not
raise, nothing changes.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn, MemoryBudgetExceeded

from . import mutant_provider

BREAKS = "CB-001"
COLLATERAL: dict[str, str] = {}


class LateTurnCallbackMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        if self._closed:
            raise RuntimeError("add_turn on a closed memory")
        check_turn(turn)
        config = self._config
        strategy = config.strategy
        if strategy == "none":
            return
        state = self._state
        entry = Entry.make(
            state.next_seq,
            turn,
            include_digest=config.include_trajectory_digest,
            size_of=self._size_of if state.metered else None,
        )
        budget = config.budget
        if budget.overflow_policy == "error" and not self._budget.fits_after_add(state, entry):
            raise MemoryBudgetExceeded(
                f"turn would take the memory over total_max_tokens={budget.total_max_tokens}"
            )
        watermark.admit(state, entry, config)
        try:
            self._budget.enforce(state)
        finally:
            self._changes += 1
            if strategy == "rolling_summary":
                self._wake()
        self._on_turn.emit(turn)  # MUTATION: not reached when the estimator raised


provider = mutant_provider("cb001-turn-unreported-when-estimator-raises", LateTurnCallbackMemory)
