"""CB-004 broken: a raising callback ends its queue's delivery, dropping the events queued
behind it.

The callback worker catches exceptions around the whole delivery loop instead of around each
call: when a callback raises, the events already queued behind it are never delivered (the
next event emitted starts a new worker). Each raising callback costs the observer every event
that was waiting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl.callbacks import CallbackQueue, logger
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


class _FragileQueue(CallbackQueue):
    async def _drain(self) -> None:
        try:  # MUTATION: one try around the loop, not around each call
            while self._events:
                args = self._events.popleft()
                await self._callback(*args)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        except Exception:
            logger.warning("%s callback raised; ignored", self._name, exc_info=True)
        finally:
            self._events.clear()


class FragileCallbacksMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cfg = self._config
        self._on_turn = _FragileQueue("on_turn_added", cfg.on_turn_added)
        self._on_summary = _FragileQueue("on_summary_updated", cfg.on_summary_updated)
        self._on_health = _FragileQueue("on_health_changed", cfg.on_health_changed)


provider = mutant_provider("cb004-raising-callback-drops-queued-events", FragileCallbacksMemory)
