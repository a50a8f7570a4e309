"""HLT-007 broken: a summarizer reply without ``summary`` counts as an empty summary.

The reply is read with ``reply.get("summary", "")``: a mapping with no ``summary`` key is a
success that installs ``""``, covering the turns sent. Replies that are no mapping or whose
``summary`` is no string still fail.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "HLT-007"
COLLATERAL: dict[str, str] = {}


class LenientReplyMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summarizer = self._summarizer
        assert summarizer is not None

        def read(payload: Mapping[str, Any]) -> Coroutine[Any, Any, Any]:
            call = summarizer(payload)  # at once, as the reference calls it

            async def reply() -> Any:
                answer = await call
                if isinstance(answer, Mapping):
                    return {"summary": answer.get("summary", "")}  # MUTATION: default ""
                return answer

            return reply()

        return await call_summarizer(
            read, batch, self._config.summarizer_timeout_s, self._abandoned
        )


provider = mutant_provider("hlt007-missing-summary-reads-empty", LenientReplyMemory)
