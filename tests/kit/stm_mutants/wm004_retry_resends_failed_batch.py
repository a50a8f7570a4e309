"""WM-004 broken: a retry sends the failed call's turns again, on top of every pending turn.

After a failed call the backend keeps that call's turns "to retry them first", and the
retry payload is built as the kept turns followed by the pending turns. But the failed
turns never left pending (a failed call removes nothing), so the retry is sent each of
them twice and its summary counts them twice. First calls and recovery calls are built as
by the reference; only calls made in RETRY duplicate turns.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class DoubleRetryMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._failed: watermark.Batch | None = None

    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        failed = self._failed
        if failed is not None and self._state.health.state is MemoryHealth.RETRY:
            # MUTATION: the failed call's turns are prepended, though they are still pending
            batch = dataclasses.replace(batch, entries=failed.entries + batch.entries)
        summary, error = await super()._call(batch)
        self._failed = batch if error is not None and not batch.recovering else None
        return summary, error


provider = mutant_provider("wm004-retry-resends-failed-batch", DoubleRetryMemory)
