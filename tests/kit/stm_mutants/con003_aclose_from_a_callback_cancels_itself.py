"""CON-003 broken: ``aclose()`` called from inside a callback cancels that callback's own
worker, and so itself.

Closing the callback queues cancels each queue's worker task and waits for it; called
from ``on_turn_added``, the first of them is the task running ``aclose()``, which is
cancelled there: the other queues are never closed and go on delivering events, and the
callback's ``aclose()`` never returns.
"""

from __future__ import annotations

import asyncio

from reference_impl.callbacks import CLOSE_GRACE_S, CallbackQueue
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class SelfCancellingQueue(CallbackQueue):
    async def aclose(self) -> None:
        self._events.clear()
        task, self._task = self._task, None
        if task is not None and not task.done():  # MUTATION: even the current task
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_GRACE_S)


class SelfCancellingMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        config = self._config
        self._on_turn = SelfCancellingQueue("on_turn_added", config.on_turn_added)
        self._on_summary = SelfCancellingQueue("on_summary_updated", config.on_summary_updated)
        self._on_health = SelfCancellingQueue("on_health_changed", config.on_health_changed)


provider = mutant_provider("con003-aclose-from-a-callback-cancels-itself", SelfCancellingMemory)
