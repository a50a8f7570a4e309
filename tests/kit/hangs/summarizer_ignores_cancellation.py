"""CON-003 broken: a summarizer call cannot be cancelled.

The memory shields every summarizer call and, when cancelled, goes on waiting for it, so
``aclose()`` (which cancels the background work and waits for it) does not return while a
call is held or hung.
"""

from __future__ import annotations

import asyncio

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory
from stm_conformance._deadline import AWAITED_FOREVER

from . import hang_provider

FAILS = "CON-003"
REASON = AWAITED_FOREVER
CHECK = "test_aclose_cancels_background_work"
WALL_S = 180


class UncancellableMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        pending = asyncio.ensure_future(super()._call(batch))
        while True:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:  # MUTATION: cancellation is swallowed
                continue


provider = hang_provider("summarizer-ignores-cancellation", UncancellableMemory)
