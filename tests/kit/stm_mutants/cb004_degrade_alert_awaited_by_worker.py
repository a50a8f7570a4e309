"""CB-004 broken: entering DEGRADED is reported by awaiting ``on_health_changed`` in the worker.

"An operator must hear of a degraded memory before it drops its pending turns": the
DEGRADED transition is delivered inline, awaited by the summarizer worker before it records
the outcome, while other transitions go through the fire-and-forget queue. A slow
``on_health_changed`` then delays the degrade itself and every ``flush()`` waiting for it; a
raising one crashes the worker.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}


class InlineAlertMemory(DefaultShortTermMemory):
    async def _work(self) -> None:
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
                error = self._reject_summary(state, batch, summary)
            if error is None:
                old = state.summary
                watermark.install(state, batch, summary)
                self._transition(state.health.on_success())
                self._on_summary.emit(old, summary)
            else:
                logger.warning("summarizer call failed: %s", error)
                change = state.health.on_failure(self._now())
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    callback = self._config.on_health_changed
                    if callback is not None:
                        await callback(*change)  # MUTATION: the alert is awaited inline
                    watermark.degrade(state, self._config)
                else:
                    self._transition(change)
            self._budget.settle(state)
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("cb004-degrade-alert-awaited-by-worker", InlineAlertMemory)
