"""CON-003 broken: ``aclose()`` spares a worker that sleeps out a retry backoff.

The worker is cancelled only while a summarizer call is in flight; one sleeping out a
retry backoff (or a recovery interval) is left to notice the close when it wakes ("it
sees ``_closed`` and stops by itself"), so it stays running for up to the whole backoff.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class SparingCloseMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._in_call = False

    async def _sleep(self, delay: float) -> None:
        await asyncio.sleep(delay)  # a plain sleep: only cancelling the worker ends it

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        self._in_call = True
        try:
            return await super()._call(batch)
        finally:
            self._in_call = False

    async def aclose(self) -> None:
        if not self._in_call:
            self._worker = None  # MUTATION: a sleeping worker is dropped, never cancelled
        await super().aclose()


provider = mutant_provider("con003-aclose-spares-sleeping-worker", SparingCloseMemory)
