"""WM-008 broken: the summarizer timeout is ``summarizer_timeout_s`` per turn sent ("a
longer batch takes longer to summarize"): a hung call with n turns holds ``flush()`` for
n times the configured timeout.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "WM-008"
COLLATERAL: dict[str, str] = {}


class Memory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        timeout = self._config.summarizer_timeout_s
        if timeout is not None:
            timeout *= len(batch.entries)  # MUTATION
        assert self._summarizer is not None
        return await call_summarizer(self._summarizer, batch, timeout, self._abandoned)


provider = mutant_provider("wm008-timeout-scaled-by-batch", Memory)
