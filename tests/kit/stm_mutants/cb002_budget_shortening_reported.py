"""CB-002 broken: a shortening of the summary by the budget is reported as an update.

The memory reports every change of its summary text to ``on_summary_updated``: under
``truncate_summary`` (or ``truncate_oldest`` with nothing else left to trim), an
``add_turn`` that shortens the installed summary to make the view fit runs
``on_summary_updated(full, shortened)`` although no summary was installed. CB-002:
``on_summary_updated(old, new)`` "MUST run once per installed summary" -- an application
that persists or counts summaries on it sees summaries the summarizer never produced.
Installs are reported as before.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import ConversationTurn

from . import mutant_provider

BREAKS = "CB-002"
COLLATERAL: dict[str, str] = {}


class ShorteningReportedMemory(DefaultShortTermMemory):
    async def add_turn(self, turn: ConversationTurn) -> None:
        state = self._state
        before = state.summary
        await super().add_turn(turn)
        if self._state is state and state.summary != before:
            self._on_summary.emit(before, state.summary)  # MUTATION: a trim reported


provider = mutant_provider("cb002-budget-shortening-reported", ShorteningReportedMemory)
