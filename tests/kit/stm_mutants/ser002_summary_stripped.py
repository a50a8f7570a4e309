"""SER-002 broken: ``to_dict`` writes the summary stripped of surrounding whitespace.

A tidy serializer: the summary an LLM returned ending in a newline, or starting with a
space, comes back from ``from_dict(to_dict())`` without it, so the restored view and its
token count differ. Summaries without such whitespace round-trip as before.
"""

from __future__ import annotations

from typing import Any

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "SER-002"
COLLATERAL: dict[str, str] = {}


class StrippedSummaryMemory(DefaultShortTermMemory):
    def to_dict(self) -> dict[str, Any]:
        state = super().to_dict()
        state["summary"] = state["summary"].strip()  # MUTATION
        return state


provider = mutant_provider("ser002-summary-stripped", StrippedSummaryMemory)
