"""CB-004 broken: ``persist()`` waits until every queued callback has been delivered.

"An observer that mirrors the summary elsewhere must have it before the record that holds
it is saved": ``persist`` first waits for the callback queues to drain. add_turn, flush and
the worker never wait for a callback, but a slow callback (or one stuck on a network call)
now delays every persist by its duration.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


class PersistAfterCallbacksMemory(DefaultShortTermMemory):
    async def persist(self, store: Any, key: str) -> None:
        # MUTATION: the callback queues drain before the state is saved
        current = asyncio.current_task()
        tasks = {
            q._task
            for q in (self._on_turn, self._on_summary, self._on_health)
            if q._task is not None and not q._task.done() and q._task is not current
        }
        if tasks:
            await asyncio.wait(tasks)
        await super().persist(store, key)


provider = mutant_provider("cb004-persist-waits-for-callbacks", PersistAfterCallbacksMemory)
