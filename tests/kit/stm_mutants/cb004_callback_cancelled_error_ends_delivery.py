"""CB-004 broken: a callback that raises ``CancelledError`` itself (as a callback that
wraps a cancelled request, or calls ``asyncio.wait_for`` wrongly, does) is taken for the
queue's own cancellation: its delivery task ends there, and the events queued behind it
are lost. Other exceptions are logged and skipped as by the reference.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl.callbacks import CallbackQueue, logger
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


class _Queue(CallbackQueue):
    async def _drain(self) -> None:
        while self._events:
            args = self._events.popleft()
            try:
                await self._callback(*args)
            except asyncio.CancelledError:
                # MUTATION: any CancelledError is taken for aclose's cancellation
                self._events.clear()
                raise
            except Exception:
                logger.warning("%s callback raised; ignored", self._name, exc_info=True)


class Memory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cfg = self._config
        self._on_turn = _Queue("on_turn_added", cfg.on_turn_added)
        self._on_summary = _Queue("on_summary_updated", cfg.on_summary_updated)
        self._on_health = _Queue("on_health_changed", cfg.on_health_changed)


provider = mutant_provider("cb004-callback-cancelled-error-ends-delivery", Memory)
