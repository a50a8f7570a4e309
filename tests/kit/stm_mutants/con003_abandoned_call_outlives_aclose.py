"""CON-003 broken: ``aclose()`` cancels a summarizer call but does not wait for it to end.

The call is cancelled, which is enough for one that ends at once; a summarizer that
honours its cancellation but awaits its own cleanup (closing a connection) is still
running when ``aclose()`` returns, owned by a memory that is closed.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class UnwaitedCallMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        assert self._summarizer is not None
        # MUTATION: a call given up on is nobody's (no set of abandoned calls to wait for)
        return await call_summarizer(self._summarizer, batch, self._config.summarizer_timeout_s)


provider = mutant_provider("con003-abandoned-call-outlives-aclose", UnwaitedCallMemory)
