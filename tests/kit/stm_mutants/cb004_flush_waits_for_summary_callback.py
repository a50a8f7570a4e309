"""CB-004 broken: ``flush()`` waits until ``on_summary_updated`` has been delivered.

"A caller that flushes and then reads its own summary store must find the summary there":
once the pending turns are covered, ``flush()`` also waits for the ``on_summary_updated``
queue to drain. The worker and ``add_turn`` never wait for a callback, but a slow
callback now delays every ``flush()`` (and so every persist-after-flush) by its duration.
"""

from __future__ import annotations

import asyncio

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


class FlushWaitsForCallbackMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        await super().flush()
        # MUTATION: flush also waits for the summary callbacks to be delivered
        task = self._on_summary._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            await asyncio.wait({task})


provider = mutant_provider("cb004-flush-waits-for-summary-callback", FlushWaitsForCallbackMemory)
