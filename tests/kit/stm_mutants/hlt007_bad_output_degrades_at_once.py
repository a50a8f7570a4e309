"""HLT-007 broken: a reply that is not ``{"summary": str}`` degrades the memory at once.

The backend tells "the summarizer is down" (an exception, a timeout) from "the summarizer
is misconfigured" (a reply of the wrong shape) and skips the retries for the latter:
retrying a wrong prompt "will not help". But invalid output must count as one failure like
any other: HEALTHY goes to RETRY and the retries run. Exceptions, timeouts and oversize
summaries are counted as by the reference.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

SLOW = "three checks of invalid output each wait their whole patience for the retry it skips"
BREAKS = "HLT-007"
COLLATERAL: dict[str, str] = {}

_MALFORMED = ("not a mapping", "no string 'summary'")


class MalformedIsFatalMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summary, error = await super()._call(batch)
        if error is not None and error.endswith(_MALFORMED):
            health = self._state.health
            # MUTATION: no retries left for a reply of the wrong shape
            health.failures = max(health.failures, health.retry_attempts)
        return summary, error


provider = mutant_provider("hlt007-bad-output-degrades-at-once", MalformedIsFatalMemory)
