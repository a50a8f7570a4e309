"""CON-003 broken: a memory closed with ``aclose()`` starts a new worker when a state is loaded.

``_wake`` checks only whether a worker is running, not whether the memory was closed, and the
worker loops until it runs out of work (``aclose()`` cancels it, so the closed flag seemed
redundant there): a ``from_dict``/``hydrate`` after ``aclose()`` (a router reusing a closed
memory object) starts a summarizer worker that nobody will ever cancel.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, logger
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class ReopeningMemory(DefaultShortTermMemory):
    def _wake(self) -> None:
        # MUTATION: no `self._closed` check
        if self._worker is not None and not self._worker.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._crash = None
        self._worker = loop.create_task(self._work(), name="stm-summarizer")
        self._worker.add_done_callback(self._worker_ended)

    async def _work(self) -> None:
        while True:  # MUTATION: relies on aclose() cancelling it
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
                    watermark.degrade(state, self._config)
                self._transition(change)
            self._budget.settle(state)
            self._notify()
            await asyncio.sleep(0)


provider = mutant_provider("con003-load-after-close-restarts-worker", ReopeningMemory)
