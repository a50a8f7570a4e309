"""WM-007 broken: ``flush()`` returns as soon as a summarizer call fails.

``flush()`` is meant to give up only when the memory is DEGRADED, but the backend's wait
condition is "until covered or no longer HEALTHY": the first failure (RETRY) ends the wait
while the retry that will cover the pending turns is still scheduled. A caller that
persists after ``flush()`` then saves a state without the summary it waited for. Flushes
that see no failure wait as in the reference.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "WM-007"
COLLATERAL: dict[str, str] = {}


class GiveUpOnRetryMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        state = self._state
        if not state.pending:
            return
        target = state.pending[-1].seq
        self._wake()
        while (
            not self._closed
            and self._state is state
            and state.summarized_through < target
            and state.health.state is MemoryHealth.HEALTHY  # MUTATION: RETRY ends the wait too
        ):
            await self._changed.wait()


provider = mutant_provider("wm007-flush-gives-up-in-retry", GiveUpOnRetryMemory)
