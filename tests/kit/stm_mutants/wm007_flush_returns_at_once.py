"""WM-007 broken: ``flush()`` returns at once, whatever is still pending."""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
# Other watermark checks use flush() as the point where every pending turn is summarized.
COLLATERAL: dict[str, str] = {}


class ImpatientFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        return  # MUTATION: does not wait for the pending turns to be summarized


provider = mutant_provider("wm007-flush-returns-at-once", ImpatientFlushMemory)
