"""WM-004 broken: a failed call the replaced state began counts on the loaded state.

The worker drops the *summary* of a call whose state ``from_dict`` replaced meanwhile, as in the
reference, but the failure path records the failure on ``self._state`` (the loaded state), so a
stale call's failure moves a freshly loaded HEALTHY state to RETRY (and can degrade it).
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class StaleFailureMemory(DefaultShortTermMemory):
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
            if error is None:
                if self._state is not state:
                    continue  # from_dict replaced the state during the call
                error = self._reject_summary(state, batch, summary)
            if error is None:
                old = state.summary
                watermark.install(state, batch, summary)
                self._transition(state.health.on_success())
                self._on_summary.emit(old, summary)
            else:
                logger.warning("summarizer call failed: %s", error)
                # MUTATION: the failure is recorded on whatever state is current now
                state = self._state
                change = state.health.on_failure(self._now())
                if change[1] is MemoryHealth.DEGRADED and change[0] is not MemoryHealth.RECOVERING:
                    watermark.degrade(state, self._config)
                self._transition(change)
            self._budget.settle(state)
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("wm004-stale-failure-counts-on-loaded-state", StaleFailureMemory)
