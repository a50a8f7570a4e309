"""WM-008 broken: a call that overruns ``summarizer_timeout_s`` gets a grace period of as
long again before it is given up.

"A soft deadline, then a hard one": at ``summarizer_timeout_s`` the worker only logs that
the call is slow, and cancels it at twice that. A call answering between the timeout and
twice the timeout is installed as a success instead of failing; a hung call still fails
(later), so flush() still returns.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "WM-008"
COLLATERAL: dict[str, str] = {}


class GraceMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        timeout = self._config.summarizer_timeout_s
        if timeout is not None:
            timeout *= 2  # MUTATION: soft deadline at the timeout, hard one at twice it
        assert self._summarizer is not None
        return await call_summarizer(self._summarizer, batch, timeout, self._abandoned)


provider = mutant_provider("wm008-soft-deadline-doubles-timeout", GraceMemory)
