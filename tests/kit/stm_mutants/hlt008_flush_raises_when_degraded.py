"""HLT-008 broken: ``flush()`` raises when the summarizer's failures degraded the memory.

"The caller asked for everything to be summarized and it was not: say so." A flush that
ends because the memory is DEGRADED raises ``RuntimeError`` naming the failure, so a
summarizer outage reaches every caller that flushes, typically at the end of a request.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-008"
COLLATERAL: dict[str, str] = {}


class RaisingFlushMemory(DefaultShortTermMemory):
    async def flush(self) -> None:
        await super().flush()
        if self._state.health.degraded:
            raise RuntimeError("the summarizer failed: memory degraded")  # MUTATION


provider = mutant_provider("hlt008-flush-raises-when-degraded", RaisingFlushMemory)
