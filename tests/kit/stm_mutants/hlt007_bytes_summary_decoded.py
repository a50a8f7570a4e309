"""HLT-007 broken: a summary returned as ``bytes`` is decoded and installed.

Lenient response parsing: an LLM client that hands back the raw body gives
``{"summary": b"..."}``, and the memory decodes it as UTF-8 and installs the text as a
successful call, where the spec counts output without a string ``summary`` as a failure.
Other non-strings (a number, ``None``) still fail. Spec, HLT-007: "Invalid summarizer
output — not a mapping, no string ``summary``, ... — MUST count as a failure."
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "HLT-007"
COLLATERAL: dict[str, str] = {}


def _decoding(summarizer: Any) -> Any:
    async def summarize(payload: Mapping[str, Any]) -> Any:
        response = await summarizer(payload)
        if isinstance(response, Mapping):
            summary = response.get("summary")
            if isinstance(summary, (bytes, bytearray)):
                # MUTATION: bytes taken for a string summary
                return {**response, "summary": bytes(summary).decode("utf-8", "replace")}
        return response

    return summarize


class DecodingMemory(DefaultShortTermMemory):
    def __init__(self, *, summarizer: Any = None, **kwargs: Any) -> None:
        if summarizer is not None and callable(summarizer):
            summarizer = _decoding(summarizer)
        super().__init__(summarizer=summarizer, **kwargs)


provider = mutant_provider("hlt007-bytes-summary-decoded", DecodingMemory)
