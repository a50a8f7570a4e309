"""CON-003 broken: a summarizer request is shielded, so ``aclose()`` does not cancel it.

The backend wraps each summarizer request in ``asyncio.shield`` so that a paid LLM call is
not thrown away when the task waiting for it is cancelled. But nothing ever collects that
answer: ``aclose()`` during a call cancels the memory's worker and leaves the request
running on its own, owned by no one. (A timed-out call is likewise left to finish.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class ShieldedCallMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summarizer = self._summarizer
        assert summarizer is not None

        def shielded(payload: Mapping[str, Any]) -> asyncio.Future[Any]:
            # MUTATION: cancelling the call no longer cancels the request behind it
            return asyncio.shield(summarizer(payload))

        return await call_summarizer(shielded, batch, self._config.summarizer_timeout_s)


provider = mutant_provider("con003-call-task-outlives-aclose", ShieldedCallMemory)
