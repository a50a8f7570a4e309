"""WM-008 broken: only a first attempt has the summarizer timeout; retries have none.

The timeout is applied where a fresh batch is sent, but a call made in RETRY goes through
the retry path, which awaits the summarizer without ``summarizer_timeout_s``. A first call
that hangs times out as it should; its retry, if it hangs too, hangs ``flush()`` forever.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer
from reference_impl.types import MemoryHealth

from . import mutant_provider

BREAKS = "WM-008"
COLLATERAL: dict[str, str] = {}


class UntimedRetryMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        if self._state.health.state is MemoryHealth.RETRY:
            assert self._summarizer is not None
            # MUTATION: no timeout
            return await call_summarizer(self._summarizer, batch, None, self._abandoned)
        return await super()._call(batch)


provider = mutant_provider("wm008-retry-calls-without-timeout", UntimedRetryMemory)
