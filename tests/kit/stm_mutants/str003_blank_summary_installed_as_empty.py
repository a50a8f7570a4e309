"""STR-003 broken: a whitespace-only summary is installed as ``""``.

A summarizer that answers ``{"summary": "  "}`` (an LLM with nothing to say) has its
summary "normalised" to the empty string before it is installed: the view then has no
``summary`` key and the next call is sent ``previous_summary=""``. The spec's summary is
"the text returned by the last successful summarizer call", and the view shows it whenever
it is non-empty: ``"  "`` is. Every other summary is installed as in the reference.
"""

from __future__ import annotations

from reference_impl import watermark
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "STR-003"
COLLATERAL: dict[str, str] = {}


class BlankSummaryMemory(DefaultShortTermMemory):
    async def _call(self, batch: watermark.Batch) -> tuple[str | None, str | None]:
        summary, error = await super()._call(batch)
        if summary is not None and not summary.strip():
            summary = ""  # MUTATION: blank text taken for "no summary"
        return summary, error


provider = mutant_provider("str003-blank-summary-installed-as-empty", BlankSummaryMemory)
