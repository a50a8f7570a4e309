"""WM-008 broken: recovery attempts (DEGRADED -> RECOVERING) run without the summarizer
timeout.

First calls and retries keep ``summarizer_timeout_s``; a recovery attempt waits as long as
the summarizer takes. A hung recovery call keeps the memory RECOVERING forever: no further
attempt, no summary, ever. ``flush()`` still returns (the memory is degraded).
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "WM-008"
COLLATERAL: dict[str, str] = {}


class UntimedRecoveryMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        assert self._summarizer is not None
        timeout = None if batch.recovering else self._config.summarizer_timeout_s  # MUTATION
        return await call_summarizer(self._summarizer, batch, timeout, self._abandoned)


provider = mutant_provider("wm008-recovery-without-timeout", UntimedRecoveryMemory)
