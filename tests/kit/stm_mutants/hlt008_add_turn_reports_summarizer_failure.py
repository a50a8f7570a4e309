"""HLT-008 broken: the next ``add_turn`` after a failed summarizer call raises its reason.

The turn is stored, and then the failure the worker saw is handed to the caller, once:
"the caller should know". A summarizer outage then breaks the agent's turn, which the
memory is there to help, not to stop.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.watermark import Batch

from . import mutant_provider

BREAKS = "HLT-008"
COLLATERAL: dict[str, str] = {}


class ReportingMemory(DefaultShortTermMemory):
    _failure: str | None = None

    async def _call(self, batch: Batch) -> tuple[str | None, str | None]:
        summary, error = await super()._call(batch)
        if error is not None:
            self._failure = error
        return summary, error

    async def add_turn(self, turn: Any) -> None:
        await super().add_turn(turn)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise RuntimeError(f"the summarizer failed: {failure}")  # MUTATION


provider = mutant_provider("hlt008-add-turn-reports-summarizer-failure", ReportingMemory)
