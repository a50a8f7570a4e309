"""CB-003 broken: a call that ``from_dict`` made stale and that then fails is reported as a
health transition, though the memory's health never changed.

The worker drops the stale call's outcome as the reference does (the loaded state is
untouched, WM-004), but "the replaced state's bookkeeping" still runs: the failure is
recorded on the replaced state's own health machine and that transition is queued for
``on_health_changed``. The memory, loaded HEALTHY, stays HEALTHY; observers get
``healthy -> retry`` all the same, and the next real transition repeats ``healthy -> ...``.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CB-003"
COLLATERAL: dict[str, str] = {}


class StaleReportMemory(DefaultShortTermMemory):
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
                if error is not None:
                    # MUTATION: the replaced state's failure is still reported
                    self._transition(state.health.on_failure(self._now()))
                continue
            if error is None:
                assert summary is not None
                error = self._reject_summary(state, batch, summary)
            if error is None:
                assert summary is not None
                old = state.summary
                watermark.install(state, batch, summary)
                self._transition(state.health.on_success())
                self._on_summary.emit(old, summary)
            else:
                logger.warning("summarizer call failed: %s", error)
                change = state.health.on_failure(self._now())
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    watermark.degrade(state, self._config)
                self._transition(change)
            try:
                self._budget.settle(state)
            except Exception:
                logger.exception("token_estimator raised bringing the view within budget")
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("cb003-stale-failure-reported", StaleReportMemory)
