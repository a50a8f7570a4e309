"""CON-003 broken: ``aclose()`` forgets the summarizer worker instead of cancelling it.

A summarizer call in flight keeps running after the memory is closed.
"""

from __future__ import annotations

from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider

BREAKS = "CON-003"
COLLATERAL: dict[str, str] = {}


class LeakyCloseMemory(DefaultShortTermMemory):
    async def aclose(self) -> None:
        self._worker = None  # MUTATION: dropped, never cancelled
        await super().aclose()


provider = mutant_provider("con003-aclose-leaves-worker", LeakyCloseMemory)
