"""WM-004 broken: a recovery call is sent an empty ``previous_summary``.

The DEGRADED view shows no summary, and the call that recovers from DEGRADED is built as
if there were none: ``previous_summary`` is ``""`` although a summary is installed, so the
summary it returns no longer carries what was summarized before. Calls made while HEALTHY
or in RETRY are sent the installed summary.
"""

from __future__ import annotations

import dataclasses

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


class RecoveryWithoutSummaryMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        if batch.recovering:
            # MUTATION: the recovery call starts from the (summary-less) DEGRADED view
            batch = dataclasses.replace(batch, previous_summary="")
        return await super()._call(batch)


provider = mutant_provider("wm004-recovery-forgets-summary", RecoveryWithoutSummaryMemory)
