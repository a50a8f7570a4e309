"""WM-007 broken: ``flush()`` judges what to wait for by the *visible* pending turns.

When the budget hides every pending turn from the view, ``flush()`` returns at once,
although those turns are pending and a summarizer call for them may be running: a caller
that persists after ``flush()`` saves a state without their summary. With any pending turn
visible it waits as it should.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
COLLATERAL: dict[str, str] = {}


class VisibleFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        state = self._state
        rolling = self._config.strategy == "rolling_summary" and not self._closed
        if rolling and state.pending and not state.visible_pending:
            return  # MUTATION: nothing visible, nothing to wait for
        await super().flush()


provider = mutant_provider("wm007-flush-sees-visible-pending-only", VisibleFlushMemory)
