"""WM-007 broken: ``flush()`` returns at once, whatever is still pending."""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "WM-007"
# Other watermark checks use flush() as the point where every pending turn is summarized.
COLLATERAL = {
    "WM-004": "the WM-004 check reads the summarizer calls right after flush()",
    "WM-005": "the WM-005 check expects a summary installed by flush()",
    "WM-006": "the WM-006 check counts the turns sent to the summarizer after flush()",
    "WM-008": "the WM-008 check expects DEGRADED once flush() returns",
    "HLT-007": "the WM-008 check is also marked HLT-007",
}
SUITE_FILES = ("test_watermark.py",)
SELECT = None


class ImpatientFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        return  # MUTATION: does not wait for the pending turns to be summarized


provider = mutant_provider("wm007-flush-returns-at-once", ImpatientFlushMemory)
