"""WM-007 broken: ``flush()`` waits until nothing is pending, not until the turns pending at
call time are covered.

The loop's exit test is "pending is empty" instead of "the watermark passed the last turn
pending when flush() was called". While turns keep coming (each evicting one more to
pending while a call runs), the flush also waits for those later turns, each of them one
more call: a flush called with u0 pending returns only when the memory catches up with
every turn added since. With no turn added during the flush it returns as the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
COLLATERAL: dict[str, str] = {}


class DrainFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        if not self._state.pending:
            return
        self._wake()
        while not self._closed:
            state = self._state
            # MUTATION: waits for pending to be empty, turns evicted after the call included
            if not state.pending or state.health.degraded:
                return
            if self._crash is not None:
                raise RuntimeError("the summarizer worker crashed") from self._crash
            await self._changed.wait()


provider = mutant_provider("wm007-flush-waits-until-pending-empty", DrainFlushMemory)
