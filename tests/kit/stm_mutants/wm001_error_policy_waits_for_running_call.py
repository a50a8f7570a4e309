"""WM-001 broken: under ``overflow_policy="error"``, ``add_turn`` of a turn that does not
fit waits for the summarizer call in flight before deciding.

"The running call may free room": when the turn would take the view over
``total_max_tokens`` and a summarizer call is running, ``add_turn`` awaits ``flush()`` (the
call's summary replaces the pending turns it covers) and only then measures again, adding
the turn or raising ``MemoryBudgetExceeded``. With a slow LLM the conversation stalls on
every turn that does not fit at once, up to ``summarizer_timeout_s``. WM-001: "``add_turn``
MUST NOT wait for the summarizer; it returns while a summarizer call is in flight".
Turns that fit, and every other policy, are added as by the reference.
"""

from __future__ import annotations

from reference_impl.entries import Entry
from reference_impl.inputs import check_turn
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "WM-001"
COLLATERAL: dict[str, str] = {}


class PatientErrorPolicyMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        config = self._config
        worker = self._worker
        if (
            config.strategy == "rolling_summary"
            and config.budget.overflow_policy == "error"
            and worker is not None
            and not worker.done()
            and not self._closed
        ):
            check_turn(turn)
            state = self._state
            entry = Entry.make(
                state.next_seq, turn, include_digest=config.include_trajectory_digest
            )
            if not self._budget.fits_after_add(state, entry):
                await self.flush()  # MUTATION: wait for the call that may free room
        await super().add_turn(turn)


provider = mutant_provider("wm001-error-policy-waits-for-running-call", PatientErrorPolicyMemory)
