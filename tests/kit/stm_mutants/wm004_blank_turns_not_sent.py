"""WM-004 broken: blank turns are covered by a summary without being sent to the summarizer.

"Nothing to summarize": a turn whose message and answer are both empty or whitespace is left
out of the payload's ``turns``, while the batch (and so the install) still covers it. Such a
turn is pending after eviction as it should be (WM-002), then removed by the install of a
call it never reached: it is delivered to no successful call at all. Turns with any text
are sent as the reference sends them.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "WM-004"
COLLATERAL: dict[str, str] = {}


def _blank(entry) -> bool:
    t = entry.turn
    return not (t.user_message or "").strip() and not (t.assistant_response or "").strip()


class SkipBlankMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        assert self._summarizer is not None
        summarizer = self._summarizer

        def filtered(payload):  # invoked at once, as the reference invokes its summarizer
            sent = [e.fresh() for e in batch.entries if not _blank(e)]  # MUTATION
            return summarizer({**payload, "turns": sent})

        return await call_summarizer(
            filtered, batch, self._config.summarizer_timeout_s, self._abandoned
        )


provider = mutant_provider("wm004-blank-turns-not-sent", SkipBlankMemory)
