"""BUD-002 broken: a loaded summary over summary_max_tokens is clipped to its longest
*head* within the limit (text[:n]) instead of its longest tail: the oldest facts are kept
and the newest dropped. Summaries from the summarizer are handled as by the reference."""

from __future__ import annotations

from typing import Any

from reference_impl import memory as memory_module
from reference_impl.budget import Budget
from reference_impl.memory import DefaultShortTermMemory

from . import mutant_provider
from ._util import swapped

BREAKS = "BUD-002"
COLLATERAL: dict[str, str] = {}


class HeadClipBudget(Budget):
    __slots__ = ()

    def clip_summary(self, text: str) -> str:
        low, high, best = 0, len(text), 0
        while low <= high:
            mid = (low + high) // 2
            if self.summary_fits(text[:mid]):  # MUTATION: head, not tail
                best, low = mid, mid + 1
            else:
                high = mid - 1
        return text[:best]


class HeadClipMemory(DefaultShortTermMemory):
    def __init__(self, **kwargs: Any) -> None:
        with swapped(memory_module, "Budget", HeadClipBudget):
            super().__init__(**kwargs)


provider = mutant_provider("bud002-load-clip-keeps-head", HeadClipMemory)
