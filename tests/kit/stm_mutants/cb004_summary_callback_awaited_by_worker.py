"""CB-004 broken: ``on_summary_updated`` is awaited by the summarizer worker.

The worker awaits the callback right after installing a summary ("the callback persists
the summary; make sure it is done"), before ``flush()`` waiters are told and before the
next call. Its exceptions are caught, so a raising callback harms nothing; a slow one
delays ``flush()`` and every later summarizer call.
"""

from __future__ import annotations

import logging

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import WorkerChange, work

BREAKS = "CB-004"
COLLATERAL: dict[str, str] = {}

logger = logging.getLogger(__name__)


async def _summary_updated(memory: DefaultShortTermMemory, old: str, new: str) -> None:
    callback = memory._config.on_summary_updated
    if callback is not None:
        try:
            await callback(old, new)  # MUTATION: awaited inline, before flush() waiters are told
        except Exception:
            logger.warning("on_summary_updated raised; ignored", exc_info=True)


class InlineSummaryCallbackMemory(DefaultShortTermMemory):
    async def _work(self) -> None:
        await work(self, WorkerChange(summary_alert=_summary_updated))


provider = mutant_provider("cb004-summary-callback-awaited-by-worker", InlineSummaryCallbackMemory)
