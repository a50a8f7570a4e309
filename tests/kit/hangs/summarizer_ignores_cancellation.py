"""CON-003 broken: a summarizer call cannot be cancelled.

The memory shields every summarizer call and, when cancelled, goes on waiting for it, so
``aclose()`` (which cancels the background work and waits for it) never returns while a
call is held or hung, and ``summarizer_timeout_s`` cannot end a hung call either (WM-008).
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference_impl.memory import DefaultShortTermMemory
from stm_conformance._deadline import AWAITED_FOREVER

from . import hang_provider

FAILS = "CON-003"
REASON = AWAITED_FOREVER
CHECK = "test_aclose_cancels_background_work"
WALL_S = 180


def _uncancellable(summarizer: Any) -> Any:
    async def call(payload: Any) -> Any:
        pending = asyncio.ensure_future(summarizer(payload))
        while True:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:  # MUTATION: cancellation is swallowed
                continue

    return call


class UncancellableMemory(DefaultShortTermMemory):
    def __init__(self, *, summarizer: Any = None, **kwargs: Any) -> None:
        wrapped = None if summarizer is None else _uncancellable(summarizer)
        super().__init__(summarizer=wrapped, **kwargs)


provider = hang_provider("summarizer-ignores-cancellation", UncancellableMemory)
