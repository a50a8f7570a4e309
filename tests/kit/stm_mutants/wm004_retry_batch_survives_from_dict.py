"""WM-004 broken: the batch kept for a retry survives a ``from_dict``.

A failed call in RETRY is retried with exactly the batch that failed ("an idempotent
retry"), which the spec allows. But the kept batch is not forgotten when ``from_dict``
replaces the state during the backoff: the loaded state's first call is the replaced
state's batch, with the replaced state's ``previous_summary`` and turns, and its summary is
installed in the loaded state (covering, by turn number, the loaded state's own pending
turns that it was never sent).
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class StaleRetryMemory(DefaultShortTermMemory):
    _retry: watermark.Batch | None = None
    _retry_state: object = None

    async def _work(self) -> None:
        while not self._closed:
            state = self._state
            # MUTATION: the batch kept for a retry is taken whatever state from_dict loaded
            # since; the reference would forget it with the replaced state.
            batch = self._retry if self._retry is not None else watermark.take_batch(state)
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
            if error is None:
                assert summary is not None
                self._retry = None
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
                # a failed call in RETRY is retried with the very batch that failed
                self._retry = batch if change[1] is MemoryHealth.RETRY else None
            try:
                self._budget.settle(state)
            except Exception:
                logger.exception("token_estimator raised bringing the view within budget")
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("wm004-retry-batch-survives-from-dict", StaleRetryMemory)
