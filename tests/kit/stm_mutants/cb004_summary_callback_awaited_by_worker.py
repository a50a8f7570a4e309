"""CB-004 broken: ``on_summary_updated`` is awaited by the summarizer worker.

The worker awaits the callback right after installing a summary ("the callback persists
the summary; make sure it is done"), before ``flush()`` waiters are told and before the
next call. Its exceptions are caught, so a raising callback harms nothing; a slow one
delays ``flush()`` and every later summarizer call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from reference_impl import watermark
from reference_impl.callbacks import CallbackQueue
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}

logger = logging.getLogger(__name__)


class InlineSummaryCallbackMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_summary = CallbackQueue("on_summary_updated", None)  # the queue is bypassed

    async def _work(self) -> None:  # the reference's, but for the summary callback
        while not self._closed:
            state = self._state
            batch = watermark.take_batch(state)
            if batch is None:
                return
            delay = state.health.wait_s(self._now())
            if delay > 0:
                await self._sleep(delay)
                continue
            if state.health.state is MemoryHealth.DEGRADED:
                self._transition(state.health.begin_recovery(self._now()))
            summary, error = await self._call(batch)
            if self._state is not state:
                continue
            if error is None:
                assert summary is not None
                error = self._reject_summary(state, batch, summary)
            installed = None
            if error is None:
                assert summary is not None
                old = state.summary
                watermark.install(state, batch, summary)
                self._transition(state.health.on_success())
                installed = (old, summary)
            else:
                change = state.health.on_failure(self._now())
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    watermark.degrade(state, self._config)
                self._transition(change)
            self._budget.settle(state)
            callback = self._config.on_summary_updated
            if installed is not None and callback is not None:
                try:
                    await callback(*installed)  # MUTATION: awaited inline, before _notify
                except Exception:
                    logger.warning("on_summary_updated raised; ignored", exc_info=True)
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("cb004-summary-callback-awaited-by-worker", InlineSummaryCallbackMemory)
