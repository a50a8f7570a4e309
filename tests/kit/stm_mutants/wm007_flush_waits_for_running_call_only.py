"""WM-007 broken: a ``flush()`` made while a summarizer call runs waits for that call only.

When a call is in flight, ``flush()`` takes the last turn *sent to that call* as its target
instead of the last turn pending now. Turns evicted while the call ran are pending when
``flush()`` is called, yet it returns once the running call's summary is installed, before
the next call covers them. With no call in flight, ``flush()`` waits as the reference.
"""

from __future__ import annotations

from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
COLLATERAL: dict[str, str] = {}


class RunningCallFlushMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._running: watermark.Batch | None = None

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        self._running = batch
        try:
            return await super()._call(batch)
        finally:
            self._running = None

    async def flush(self) -> None:
        if self._config.strategy != "rolling_summary" or self._closed:
            return
        state = self._state
        if not state.pending:
            return
        running = self._running
        # MUTATION: the running call's last turn, not the last turn pending now
        target = running.through if running is not None else state.pending[-1].seq
        self._wake()
        while (
            not self._closed
            and self._state is state
            and state.summarized_through < target
            and not state.health.degraded
        ):
            await self._changed.wait()


provider = mutant_provider("wm007-flush-waits-for-running-call-only", RunningCallFlushMemory)
