"""HLT-007 broken: output that is no mapping but has a ``summary`` attribute is accepted.

Duck typing for the response objects of LLM client libraries (pydantic models,
dataclasses): a reply that is not a mapping but has a ``summary`` attribute is read as
``{"summary": reply.summary}`` and installed, where the spec counts it as a failure.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory, call_summarizer

from . import mutant_provider

BREAKS = "HLT-007"
COLLATERAL: dict[str, str] = {}


class DuckTypedMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summarizer = self._summarizer
        assert summarizer is not None

        def read(payload: Mapping[str, Any]) -> Coroutine[Any, Any, Any]:
            call = summarizer(payload)  # at once, as the reference calls it

            async def reply() -> Any:
                answer = await call
                if not isinstance(answer, Mapping) and hasattr(answer, "summary"):
                    return {"summary": answer.summary}  # MUTATION: a response object accepted
                return answer

            return reply()

        return await call_summarizer(
            read, batch, self._config.summarizer_timeout_s, self._abandoned
        )


provider = mutant_provider("hlt007-attribute-summary-accepted", DuckTypedMemory)
